#!/usr/bin/env bash
# --global-batch N (runtime/setup/global_batch.h): one process and dp 2 given the same N run the
# same sequences per step (micro-batch and grad-accum derived per layout) and so the same losses
# (1e-5 relative: the layouts' tolerance, tests/runtime/train/layouts_common.h — the sums of
# another grouping in f32); the split is printed; an N the replicas do not divide and flags that
# contradict it are refused with the fix (exit 2); `plan` prints the split and the global batch.
# usage: global_batch_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 2 --d-model 32 --heads 4 --seq-len 16 --lr 3e-3 --log-every 100 --steps 6)
runq() { "$@" >"$D/last.out" 2>&1 || bad "exit $?: $* : $(tail -3 "$D/last.out")"; }
compare() {  # compare A.jsonl B.jsonl RTOL WHAT
  python3 - "$@" <<'PY' || bad "$4"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
rtol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= rtol * abs(x[k]), f"{sys.argv[4]}: step {x['step']} {k} {x[k]} vs {y[k]}"
PY
}

# one process: --micro-batch 2 is the cap, so 2 x 4; dp 2: 2 x 2 per replica
runq "$BIN" "${small[@]}" --global-batch 8 --micro-batch 2 --metrics "$D/one.jsonl"
grep -qx "global batch 8 = micro-batch 2 x grad-accum 4 x dp 1" "$D/last.out" || bad "np 1: no split line: $(head -3 "$D/last.out")"
grep -q "| global batch 8 × 16 tokens |" "$D/last.out" || bad "np 1: the model line: $(grep '^model' "$D/last.out")"
runq "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --global-batch 8 --metrics "$D/dp2.jsonl"
grep -qx "global batch 8 = micro-batch 4 x grad-accum 1 x dp 2" "$D/last.out" || bad "dp 2: no split line: $(head -3 "$D/last.out")"
compare "$D/one.jsonl" "$D/dp2.jsonl" 1e-5 "--global-batch 8: dp 2 differs from one process"
# without --global-batch the same flags at np 2 are twice the batch (the default), so losses differ
runq "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --micro-batch 2 --grad-accum 4 --metrics "$D/doubled.jsonl"
python3 -c "
import json
a = [json.loads(l)['loss'] for l in open('$D/one.jsonl')]; b = [json.loads(l)['loss'] for l in open('$D/doubled.jsonl')]
assert a[1:] != b[1:], 'the doubled batch gave the same losses'" || bad "the comparison cannot tell batches apart"
# --grad-accum on the command line: the micro-batch is derived
runq "$BIN" "${small[@]}" --steps 1 --global-batch 12 --grad-accum 3
grep -qx "global batch 12 = micro-batch 4 x grad-accum 3 x dp 1" "$D/last.out" || bad "--grad-accum 3: $(head -2 "$D/last.out")"
# the largest divisor under the cap (default micro-batch 4): 6 per replica -> 3 x 2
runq "$BIN" "${small[@]}" --steps 1 --global-batch 6
grep -qx "global batch 6 = micro-batch 3 x grad-accum 2 x dp 1" "$D/last.out" || bad "--global-batch 6: $(head -2 "$D/last.out")"

# refusals: exit 2, one line naming the fix
refused() {  # refused WANT CMD...: exit 2 and WANT among the lines
  local want="$1"; shift
  "$@" >"$D/r.out" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] || bad "exit $rc (want 2): $*"
  grep -qF -- "$want" "$D/r.out" || bad "no '$want' in: $(cat "$D/r.out")"
}
refused "--global-batch: 7 sequences do not split over dp 2 replicas: give a multiple of 2 (6 or 8), or another --dp" \
  "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --global-batch 7
refused "--global-batch: 8 but --micro-batch 4 x --grad-accum 1 x dp 1 = 4: give two of the three (--global-batch derives the third)" \
  "$BIN" "${small[@]}" --global-batch 8 --micro-batch 4 --grad-accum 1
refused "--micro-batch: 3 does not divide the 8 sequences per replica of --global-batch 8 at dp 1: give a divisor of 8, or leave --micro-batch out" \
  "$BIN" "${small[@]}" --global-batch 8 --micro-batch 3

# plan: the split of the flags' layout and the global batch
"$BIN" plan --layers 2 --d-model 32 --heads 4 --seq-len 16 --dp 2 --global-batch 16 >"$D/plan.out" 2>&1 || bad "plan: $(cat "$D/plan.out")"
grep -q "| micro-batch 4, grad-accum 2, global batch 16 x 16 tokens |" "$D/plan.out" || bad "plan: $(head -2 "$D/plan.out")"

[[ $fails -eq 0 ]] && echo "global batch test passed" || exit 1
