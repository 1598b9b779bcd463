#!/usr/bin/env bash
# --val-data under every layout: the validation loss of each evaluation step equals one process's
# (to 1e-5 relative) under dp 2, tp 2, pp 2 (1F1B and GPipe), pp 2 interleaved over 2 chunks per
# stage, and with 4 ranks dp 2 x pp 2 and pp 4 — the pipelines validate through their stages
# (a forward-only pass over the chunks, SHARDTRAIN_P2P=strict too). And --val-data without
# --eval-every validates every max(1, steps / 10) steps.
# usage: eval_layouts_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

python3 -c "
import random
random.seed(5)
words = 'the a model layer stage rank loss step pipeline data tensor gradient batch'.split()
for name, n in (('train', 6000), ('val', 3000)):
    open('$D/' + name + '.txt', 'w').write(' '.join(random.choice(words) for _ in range(n)))
"
"$BIN" prepare --text "$D/train.txt" --out "$D/train.bin" >/dev/null || { echo "FAIL: prepare"; exit 1; }
"$BIN" prepare --text "$D/val.txt" --out "$D/val.bin" >/dev/null || { echo "FAIL: prepare"; exit 1; }
# 4 layers (pp 4, interleaved 2 x 2 chunks), grad-accum 4 (a multiple of pp), val micro-batch 2
common=(train --layers 4 --d-model 32 --heads 4 --seq-len 16 --micro-batch 2 --grad-accum 4 --lr 3e-3 --steps 4
        --data "$D/train.bin" --val-data "$D/val.bin" --eval-every 2 --log-every 100)

run() {  # run NAME NP FLAGS...: metrics in $D/NAME.jsonl
  local name="$1" np="$2"
  shift 2
  local cmd=("$BIN" "${common[@]}" --metrics "$D/$name.jsonl" "$@")
  [[ "$np" == 1 ]] || cmd=("${MPI[@]}" -np "$np" "${cmd[@]}")
  timeout 240 "${cmd[@]}" >"$D/$name.out" 2>&1 || bad "$name: exit $?: $(tail -5 "$D/$name.out")"
}
same_val() {  # same_val NAME [REFERENCE]: val_loss on the same steps as one process, to 1e-5 relative
  python3 - "$D/${2:-one}.jsonl" "$D/$1.jsonl" "$1" <<'PY' || bad "$1: val loss differs from one process"
import json, sys
def vals(p):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r}
want, got, name = vals(sys.argv[1]), vals(sys.argv[2]), sys.argv[3]
assert sorted(want) == [2, 4], want
# f32 activations and the per-replica partial sums added in f32: far below 1e-5
for s, v in want.items():
    assert s in got and abs(got[s] - v) <= 1e-5 * abs(v), f"{name} step {s}: {got.get(s)} vs one process {v}"
print(f"{name}: val loss {[round(got[s], 6) for s in sorted(got)]} as one process")
PY
}

run one 1
run one_k8 1 --grad-accum 8  # the global batch of dp 2 x grad-accum 4
run dp2 2 --dp 2
run tp2 2 --tp 2
run pp2 2 --pp 2
run pp2_gpipe 2 --pp 2 --schedule gpipe
run pp2_interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2
SHARDTRAIN_P2P=strict run pp2_strict 2 --pp 2 --schedule interleaved --virtual-stages 2
run dp2pp2 4 --dp 2 --pp 2
run pp4 4 --pp 4
for n in tp2 pp2 pp2_gpipe pp2_interleaved pp2_strict pp4; do same_val "$n"; done
for n in dp2 dp2pp2; do same_val "$n" one_k8; done

# --val-data alone: every max(1, 20 / 10) = 2 steps
"$BIN" train --layers 1 --d-model 32 --heads 4 --seq-len 16 --steps 20 --data "$D/train.bin" --val-data "$D/val.bin" \
  --metrics "$D/default.jsonl" >"$D/default.out" 2>&1 || bad "--val-data without --eval-every failed: $(tail -3 "$D/default.out")"
python3 -c "
import json
steps = [r['step'] for r in map(json.loads, open('$D/default.jsonl')) if 'val_loss' in r]
assert steps == list(range(2, 21, 2)), steps
" || bad "--val-data without --eval-every does not validate every 2 of 20 steps"
grep -q "^validation: every 2 steps on " "$D/default.out" || bad "no 'validation: every 2 steps' line: $(head -3 "$D/default.out")"

[[ $fails -eq 0 ]] && echo "eval layouts test passed" || exit 1
