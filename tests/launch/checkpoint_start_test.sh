#!/usr/bin/env bash
# A fresh run never deletes another run's checkpoints. After a "demo" that left steps 2 and 4 in
# a --checkpoint-dir with --keep-checkpoints 2, a run without --resume into the same dir refuses
# at start with one line naming the dir and the ways on (--resume 1, a new --checkpoint-dir,
# --overwrite-checkpoints 1), in one process and under mpirun (rank 0 decides, every rank
# follows: one error line, no hang), and steps 2 and 4 are still there; --resume 1 on an empty
# dir says it starts fresh and trains, on a missing one (a typo) it stops naming the dir meant; --overwrite-checkpoints 1 writes there (and
# says so); --resume with --overwrite-checkpoints is a usage error.
# usage: checkpoint_start_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 100)
steps_in() { (cd "$1" 2>/dev/null && ls -d step_* 2>/dev/null | tr '\n' ' '); }

"$BIN" "${small[@]}" --steps 4 --checkpoint-every 2 --keep-checkpoints 2 --checkpoint-dir "$D/demo" >/dev/null 2>&1 ||
  bad "the demo-like run failed"
[[ "$(steps_in "$D/demo")" == "step_00000002 step_00000004 " ]] || bad "demo dir holds: $(steps_in "$D/demo")"

refused() {  # refused NAME command...: exit != 0, one error line naming the dir and the ways on
  local name="$1"
  shift
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || bad "$name: exit $rc (want a refusal): $out"
  [[ $(grep -c "shardtrain: error:" <<<"$out") -eq 1 ]] || bad "$name: not one error line: $out"
  grep -q "shardtrain: error: --checkpoint-dir $D/demo already holds 2 checkpoints (newest step 4) of another run: continue it with --resume 1, or give a new --checkpoint-dir (--overwrite-checkpoints 1 writes there anyway)$" <<<"$out" ||
    bad "$name: not the refusal line: $out"
  grep -q "^step " <<<"$out" && bad "$name: trained before refusing: $out"
  [[ "$(steps_in "$D/demo")" == "step_00000002 step_00000004 " ]] || bad "$name: the demo's checkpoints changed: $(steps_in "$D/demo")"
}
refused "one process" "$BIN" "${small[@]}" --steps 1 --checkpoint-dir "$D/demo" --keep-checkpoints 2
refused "2 ranks dp" "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --steps 1 --checkpoint-dir "$D/demo"
refused "2 ranks pp" "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --layers 2 --pp 2 --steps 1 --checkpoint-dir "$D/demo"

# --resume on an empty dir: one line, then it trains; on a missing one (a typo): one error line,
# nothing created (a job that always passes --resume 1 makes its dir first)
mkdir -p "$D/empty" "$D/empty2"
out=$("$BIN" "${small[@]}" --steps 2 --checkpoint-dir "$D/empty" --resume 1 2>&1) || bad "--resume on $D/empty failed: $out"
[[ $(grep -c "^--resume: no checkpoint in $D/empty yet; starting fresh$" <<<"$out") -eq 1 ]] || bad "--resume on $D/empty: no fresh-start line: $out"
[[ "$(steps_in "$D/empty")" == "step_00000002 " ]] || bad "--resume on $D/empty: checkpoints $(steps_in "$D/empty")"
out=$("${MPI[@]}" -np 2 "$BIN" "${small[@]}" --steps 2 --checkpoint-dir "$D/empty2" --resume 1 2>&1) || bad "np 2 --resume fresh: $out"
[[ $(grep -c "^--resume: no checkpoint in $D/empty2 yet; starting fresh$" <<<"$out") -eq 1 ]] || bad "np 2: not one fresh-start line: $out"
for np in 1 2; do
  out=$(timeout 60 "${MPI[@]}" -np $np "$BIN" "${small[@]}" --steps 2 --checkpoint-dir "$D/demp" --resume 1 2>&1)
  [[ $? -ne 0 ]] || bad "np $np: --resume on a missing dir trained: $out"
  [[ $(grep -c "shardtrain: error: --resume: --checkpoint-dir $D/demp does not exist (did you mean $D/demo?): check the path, or drop --resume 1 to start a new run there$" <<<"$out") -eq 1 ]] ||
    bad "np $np: --resume on a missing dir: not the one error line: $out"
  [[ ! -e "$D/demp" ]] || bad "np $np: --resume on a missing dir created it"
done
# ... and --resume on the demo's dir continues it
out=$("$BIN" "${small[@]}" --steps 6 --checkpoint-dir "$D/demo" --keep-checkpoints 2 --resume 1 2>&1) || bad "resume: $out"
grep -q "^resumed from $D/demo/step_00000004 at step 4$" <<<"$out" || bad "resume: no 'resumed from' line: $out"
# --overwrite-checkpoints 1: writes there, saying so
out=$("$BIN" "${small[@]}" --steps 1 --checkpoint-dir "$D/demo" --keep-checkpoints 0 --overwrite-checkpoints 1 2>&1) ||
  bad "--overwrite-checkpoints 1 failed: $out"
grep -q "^--overwrite-checkpoints: writing into $D/demo, which holds 2 checkpoints (newest step 6) of another run$" <<<"$out" ||
  bad "--overwrite-checkpoints: no line saying so: $out"
[[ -d "$D/demo/step_00000001" ]] || bad "--overwrite-checkpoints: step 1 not written: $(steps_in "$D/demo")"
out=$("$BIN" "${small[@]}" --checkpoint-dir "$D/demo" --resume 1 --overwrite-checkpoints 1 2>&1)
[[ $? -eq 2 && "$out" == *"--overwrite-checkpoints (from command line): a resumed run continues its checkpoints"* ]] ||
  bad "--resume with --overwrite-checkpoints: $out"

[[ $fails -eq 0 ]] && echo "checkpoint start test passed" || exit 1
