#!/usr/bin/env bash
# What a resumed run continues. --shuffle 1: 6 steps in one go equal 3 steps and a resume to 6 (bit
# for bit on the CPU), dp 2 and pp 2 equal one process (1e-5), the order is not the file's (the
# first loss differs from --shuffle 0), a resume with another --shuffle is refused. The lr
# schedule: state.json records its length; a cosine of 4 steps resumed with --steps 8 keeps its
# 4-step curve (steps 5-8 at the floor lr) and says so; a checkpoint without the field (older
# files, which had no checksum either) is resumed as before (the cosine stretched to the new --steps).
# usage: resume_order_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 2 --d-model 32 --heads 4 --seq-len 16 --micro-batch 2 --grad-accum 2 --lr 3e-3 --log-every 100)
runq() { "$@" >"$D/last.out" 2>&1 || bad "exit $?: $* : $(tail -3 "$D/last.out")"; }
compare() {  # compare A.jsonl B.jsonl RTOL WHAT: the same losses and grad norms step for step
  python3 - "$@" <<'PY' || bad "$4"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
rtol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "lr"):
        assert abs(x[k] - y[k]) <= rtol * abs(x[k]), f"{sys.argv[4]}: step {x['step']} {k} {x[k]} vs {y[k]}"
PY
}

# --shuffle 1
runq "$BIN" "${small[@]}" --shuffle 1 --steps 6 --metrics "$D/one.jsonl"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 3 --checkpoint-dir "$D/ck" --metrics "$D/resumed.jsonl"
state() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))" "$@"; }
[[ "$(state "$D/ck/step_00000003/state.json" "data['shuffle'], data['shuffle_seed']")" == "(True, 1)" ]] ||
  bad "state.json does not record the shuffled order"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 6 --checkpoint-dir "$D/ck" --resume 1 --metrics "$D/resumed.jsonl"
compare "$D/one.jsonl" "$D/resumed.jsonl" 0 "shuffled: 3 steps + resume to 6 differ from 6 steps"
runq "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --shuffle 1 --steps 6 --dp 2 --grad-accum 1 --metrics "$D/dp2.jsonl"
compare "$D/one.jsonl" "$D/dp2.jsonl" 1e-5 "shuffled: dp 2 differs from one process"
runq "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --shuffle 1 --steps 6 --pp 2 --metrics "$D/pp2.jsonl"
compare "$D/one.jsonl" "$D/pp2.jsonl" 1e-5 "shuffled: pp 2 differs from one process"
runq "$BIN" "${small[@]}" --shuffle 0 --steps 1 --metrics "$D/sequential.jsonl"
python3 -c "
import json
a = json.loads(open('$D/one.jsonl').readline())['loss']; b = json.loads(open('$D/sequential.jsonl').readline())['loss']
assert a != b, (a, b)" || bad "--shuffle 1 reads the first step's sequences in the file's order"
out=$("$BIN" "${small[@]}" --shuffle 0 --steps 8 --checkpoint-dir "$D/ck" --resume 1 2>&1)
[[ $? -ne 0 && "$out" == *"was written by a run with --shuffle 1 --seed 1, this one has --shuffle 0 (the data order would change)"* ]] ||
  bad "a resume that changes --shuffle is not refused: $out"

# the lr schedule's length
cos=(--lr-schedule cosine --warmup 0 --min-lr-ratio 0.1)
runq "$BIN" "${small[@]}" "${cos[@]}" --steps 4 --checkpoint-dir "$D/cos" --metrics "$D/cos.jsonl"
[[ "$(state "$D/cos/step_00000004/state.json" "lr_schedule['total_steps']")" == 4 ]] || bad "state.json lacks lr_schedule.total_steps 4"
cp -r "$D/cos" "$D/cos_old"
python3 -c "
import json
p = '$D/cos_old/step_00000004/state.json'
s = json.load(open(p)); del s['lr_schedule'], s['checksum64']; json.dump(s, open(p, 'w'))"  # as older files: neither
runq "$BIN" "${small[@]}" "${cos[@]}" --steps 8 --checkpoint-dir "$D/cos" --resume 1 --metrics "$D/cos.jsonl"
grep -q "^lr schedule: the checkpoint's cosine ends at step 4; steps 5-8 run at its floor lr 0.0003$" "$D/last.out" ||
  bad "no line saying the schedule keeps its length: $(head -4 "$D/last.out")"
# (a state.json without its checksum, as before 2026-12-03: read only when asked, --allow-unchecked 1)
runq "$BIN" "${small[@]}" "${cos[@]}" --steps 8 --checkpoint-dir "$D/cos_old" --resume 1 --allow-unchecked 1 \
  --metrics "$D/cos_old.jsonl"
python3 - "$D/cos.jsonl" "$D/cos_old.jsonl" <<'PY' || bad "the schedule on resume"
import json, math, sys
kept, old = ([json.loads(l)["lr"] for l in open(p)] for p in sys.argv[1:3])
lr, floor = 3e-3, 3e-4
cosine = lambda s, total: floor + (lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, total - 1))))
want4 = [cosine(s, 4) for s in range(4)]
assert len(kept) == 8, kept
for s in range(4):
    assert math.isclose(kept[s], want4[s], rel_tol=1e-12), (s, kept[s], want4[s])
for s in range(4, 8):  # kept: the 4-step cosine's floor
    assert math.isclose(kept[s], floor, rel_tol=1e-12), ("kept", s + 1, kept[s])
for s in range(4, 8):  # a checkpoint without the field: stretched to 8 steps, as before
    assert math.isclose(old[s - 4], cosine(s, 8), rel_tol=1e-12), ("old", s + 1, old[s - 4], cosine(s, 8))
PY

[[ $fails -eq 0 ]] && echo "resume order test passed" || exit 1
