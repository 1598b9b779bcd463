#!/usr/bin/env bash
# SIGINT / SIGTERM stop a run cleanly (launch/stop_signals.h, docs/launch.md "Stopping a run"):
# every rank stops after the same step, a checkpoint is saved there, one line names the step, the
# checkpoint and the command that resumes (exit 130 / 143 alone and from launch/mpirun.sh, 0 from
# the ranks of an MPI job: no Open MPI banners), and that command's run continues to
# the losses of an unbroken run bit for bit (the CPU's resume is exact). The signal at a chosen
# step comes from the test seam (SHARDTRAIN_TEST_SIGNAL_STEP, docs/testing.md) — one process, and
# rank 1 of 2 under mpirun —, then from outside: kill -INT of one process while it trains, kill
# -TERM of one rank's process under mpirun -np 2 (both stop at the step the line names, the
# checkpoint resumes), --save-on-signal 0 (the last periodic checkpoint stays the newest), a
# second signal (at once, one line, exit 128 + signal), Ctrl-C in a terminal under launch/mpirun.sh
# -n 2 (SIGINT to its process group); and a resume with nothing left to run (one line, no table).
# usage: stop_signal_test.sh MPIEXEC SHARDTRAIN SOURCE_DIR
set -uo pipefail
MPIEXEC="$1" BIN="$2" SRC="$3"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 2 --d-model 32 --heads 4 --seq-len 16 --micro-batch 2 --grad-accum 2 --lr 3e-3 --log-every 100)
compare() {  # compare A.jsonl B.jsonl WHAT: the same steps, losses and grad norms, bit for bit
  python3 - "$@" <<'PY' || bad "$3"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "lr"):
        assert x[k] == y[k], f"step {x['step']} {k} {x[k]} vs {y[k]}"
PY
}
lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }
# the "resume: ..." part of the stop line in file $1
resume_cmd() { sed -n 's/^stopped by .*; resume: //p' "$1"; }

# --- the seam, one process: SIGINT at step 5 of 12, a periodic checkpoint every 4
SHARDTRAIN_TEST_SIGNAL_STEP=5 SHARDTRAIN_TEST_SIGNAL=INT "$BIN" "${small[@]}" --steps 12 --checkpoint-every 4 \
  --checkpoint-dir "$D/a/ck" --metrics "$D/a/m.jsonl" >"$D/a.out" 2>&1
rc=$?
[[ $rc -eq 130 ]] || bad "SIGINT: exit $rc, want 130: $(tail -3 "$D/a.out")"
want="stopped by SIGINT after step 5 of 12; checkpoint $D/a/ck/step_00000005; resume: $BIN ${small[*]} --steps 12 --checkpoint-every 4 --checkpoint-dir $D/a/ck --metrics $D/a/m.jsonl --resume 1"
[[ "$(tail -n 1 "$D/a.out")" == "$want" ]] || bad "the stop line: '$(tail -n 1 "$D/a.out")', want '$want'"
[[ $(grep -c '^stopped by' "$D/a.out") -eq 1 ]] || bad "not one stop line: $(cat "$D/a.out")"
[[ $(lines "$D/a/m.jsonl") -eq 5 && -f "$D/a/ck/step_00000005/state.json" && -f "$D/a/ck/step_00000004/state.json" ]] ||
  bad "after the stop: $(lines "$D/a/m.jsonl") metrics lines, checkpoints $(ls "$D/a/ck")"
cmd=$(resume_cmd "$D/a.out")
eval "$cmd" >"$D/a2.out" 2>&1 || bad "the printed resume command failed: $cmd: $(tail -3 "$D/a2.out")"
grep -q "^resumed from $D/a/ck/step_00000005 at step 5$" "$D/a2.out" || bad "the resume: $(head -3 "$D/a2.out")"
"$BIN" "${small[@]}" --steps 12 --metrics "$D/unbroken.jsonl" >"$D/u.out" 2>&1 || bad "the unbroken run: $(tail -3 "$D/u.out")"
compare "$D/unbroken.jsonl" "$D/a/m.jsonl" "stopped at 5 and resumed differs from an unbroken run"
# a resume with nothing left to run says so in one line: no step, no table
"$BIN" "${small[@]}" --steps 3 --checkpoint-dir "$D/a/ck" --resume 1 >"$D/noop.out" 2>&1 || bad "the no-op resume failed"
grep -qx "nothing to do: $D/a/ck/step_00000012 is at step 12, at or past --steps 3 (a larger --steps goes on from it)" "$D/noop.out" &&
  ! grep -q "memory per rank" "$D/noop.out" || bad "the no-op resume: $(cat "$D/noop.out")"

# --- --save-on-signal 0: SIGTERM at step 6; the checkpoint of step 4 stays the newest
SHARDTRAIN_TEST_SIGNAL_STEP=6 "$BIN" "${small[@]}" --steps 12 --checkpoint-every 4 --save-on-signal 0 \
  --checkpoint-dir "$D/b/ck" >"$D/b.out" 2>&1
rc=$?
[[ $rc -eq 143 ]] || bad "SIGTERM: exit $rc, want 143"
[[ "$(tail -n 1 "$D/b.out")" == "stopped by SIGTERM after step 6 of 12; checkpoint $D/b/ck/step_00000004 (--save-on-signal 0: the steps after it run again); resume: "* ]] ||
  bad "--save-on-signal 0: $(tail -n 1 "$D/b.out")"
[[ "$(ls "$D/b/ck")" == "step_00000004" ]] || bad "--save-on-signal 0 saved: $(ls "$D/b/ck")"
# no --checkpoint-dir: nothing to resume, said so
SHARDTRAIN_TEST_SIGNAL_STEP=2 "$BIN" "${small[@]}" --steps 12 >"$D/c.out" 2>&1
[[ $? -eq 143 && "$(tail -n 1 "$D/c.out")" == "stopped by SIGTERM after step 2 of 12; no checkpoint (no --checkpoint-dir): a rerun starts over" ]] ||
  bad "no --checkpoint-dir: $(tail -n 1 "$D/c.out")"

# --- the seam under mpirun -np 2: rank 1 gets SIGTERM at step 5; both stop after it
SHARDTRAIN_TEST_SIGNAL_STEP=5 SHARDTRAIN_TEST_SIGNAL_RANK=1 "${MPI[@]}" -x SHARDTRAIN_TEST_SIGNAL_STEP \
  -x SHARDTRAIN_TEST_SIGNAL_RANK -np 2 "$BIN" "${small[@]}" --dp 2 --grad-accum 1 --steps 10 \
  --checkpoint-dir "$D/m/ck" --metrics "$D/m/m.jsonl" >"$D/m.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || bad "mpirun: a cleanly stopped job exited $rc (its ranks exit 0: launch/stop_signals.h)"
want="stopped by SIGTERM after step 5 of 10; checkpoint $D/m/ck/step_00000005; resume: launch/mpirun.sh -n 2 -- $BIN ${small[*]} --dp 2 --grad-accum 1 --steps 10 --checkpoint-dir $D/m/ck --metrics $D/m/m.jsonl --resume 1"
grep -qxF "$want" "$D/m.out" || bad "mpirun: no line '$want' in: $(cat "$D/m.out")"
[[ "$(tail -n 1 "$D/m.out")" == "$want" ]] && ! grep -q -e "non-zero" -e "second signal" "$D/m.out" ||
  bad "mpirun: the stop line is not the last, or Open MPI's banners: $(cat "$D/m.out")"
[[ $(lines "$D/m/m.jsonl") -eq 5 ]] || bad "mpirun: $(lines "$D/m/m.jsonl") metrics lines, want 5"
cmd=$(resume_cmd "$D/m.out")
(cd "$SRC" && eval "$cmd") >"$D/m2.out" 2>&1 || bad "mpirun: the printed resume command failed: $cmd: $(tail -3 "$D/m2.out")"
"${MPI[@]}" -np 2 "$BIN" "${small[@]}" --dp 2 --grad-accum 1 --steps 10 --metrics "$D/mu.jsonl" >"$D/mu.out" 2>&1 ||
  bad "mpirun: the unbroken run: $(tail -3 "$D/mu.out")"
compare "$D/mu.jsonl" "$D/m/m.jsonl" "mpirun: stopped at 5 and resumed differs from an unbroken run"

# --- from outside: kill -INT of one process while it trains
wait_steps() {  # wait_steps FILE N PID: until FILE has N lines (or PID ended, or 60 s)
  for _ in $(seq 600); do
    [[ $(lines "$1") -ge $2 ]] && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
long=(--steps 100000 --checkpoint-dir "$D/k/ck" --metrics "$D/k/m.jsonl")
"$BIN" "${small[@]}" "${long[@]}" >"$D/k.out" 2>&1 &
pid=$!
wait_steps "$D/k/m.jsonl" 3 $pid || bad "kill -INT: the run did not reach step 3: $(tail -3 "$D/k.out")"
kill -INT $pid
wait $pid
rc=$?
s=$(lines "$D/k/m.jsonl")
[[ $rc -eq 130 ]] || bad "kill -INT: exit $rc: $(tail -3 "$D/k.out")"
grep -q "^stopped by SIGINT after step $s of 100000; checkpoint $D/k/ck/step_$(printf %08d "$s"); resume: " "$D/k.out" ||
  bad "kill -INT: no stop line at step $s: $(tail -2 "$D/k.out")"
[[ -f "$D/k/ck/step_$(printf %08d "$s")/state.json" ]] || bad "kill -INT: no checkpoint at step $s: $(ls "$D/k/ck")"

# a second signal: at once, one line, 128 + its number
"$BIN" "${small[@]}" --steps 100000 --metrics "$D/k2.jsonl" >"$D/k2.out" 2>&1 &
pid=$!
wait_steps "$D/k2.jsonl" 2 $pid || bad "second signal: the run did not reach step 2"
kill -INT $pid
kill -TERM $pid
wait $pid
rc=$?
# the first may have stopped the run before the second came (a step boundary in between): both end it
if [[ $rc -eq 143 ]]; then
  grep -qx "shardtrain: a second signal (SIGTERM): stopped at once; nothing saved since the newest checkpoint" "$D/k2.out" ||
    bad "second signal: $(tail -2 "$D/k2.out")"
elif [[ $rc -ne 130 ]]; then
  bad "second signal: exit $rc: $(tail -2 "$D/k2.out")"
fi

# --- from outside under mpirun -np 2: kill -TERM of one rank's process
"${MPI[@]}" -np 2 "$BIN" "${small[@]}" --dp 2 --grad-accum 1 --steps 100000 --checkpoint-dir "$D/j/ck" \
  --metrics "$D/j/m.jsonl" >"$D/j.out" 2>&1 &
job=$!
wait_steps "$D/j/m.jsonl" 3 $job || bad "mpirun kill: the job did not reach step 3: $(tail -3 "$D/j.out")"
ranks=($(ps -o pid= --ppid $job))
[[ ${#ranks[@]} -eq 2 ]] || bad "mpirun kill: mpirun's children: ${ranks[*]}"
kill -TERM "${ranks[1]}"
wait $job
rc=$?
s=$(lines "$D/j/m.jsonl")
[[ $rc -eq 0 ]] || bad "mpirun kill: exit $rc"
grep -q "^stopped by SIGTERM after step $s of 100000; checkpoint $D/j/ck/step_$(printf %08d "$s"); resume: launch/mpirun.sh -n 2 -- " "$D/j.out" ||
  bad "mpirun kill: no stop line at step $s: $(cat "$D/j.out")"
# whole: every rank's part is there (the resume loads it on 2 ranks and runs one more step)
"${MPI[@]}" -np 2 "$BIN" "${small[@]}" --dp 2 --grad-accum 1 --steps $((s + 1)) --checkpoint-dir "$D/j/ck" --resume 1 \
  --metrics "$D/j/m.jsonl" >"$D/j2.out" 2>&1 || bad "mpirun kill: the checkpoint of step $s does not resume: $(tail -3 "$D/j2.out")"
grep -q "^resumed from $D/j/ck/step_$(printf %08d "$s") at step $s$" "$D/j2.out" || bad "mpirun kill: $(head -3 "$D/j2.out")"

# --- Ctrl-C in a terminal under launch/mpirun.sh -n 2: SIGINT to the wrapper's process group
set -m  # the wrapper in a process group of its own, as a terminal's foreground job
(cd "$SRC" && exec launch/mpirun.sh -n 2 -- "$BIN" "${small[@]}" --dp 2 --grad-accum 1 --steps 100000 \
  --checkpoint-dir "$D/t/ck" --metrics "$D/t/m.jsonl") >"$D/t.out" 2>&1 &
job=$!
set +m
wait_steps "$D/t/m.jsonl" 3 $job || bad "Ctrl-C: the job did not reach step 3: $(tail -3 "$D/t.out")"
kill -INT -- -$job
wait $job
rc=$?
s=$(lines "$D/t/m.jsonl")
[[ $rc -eq 130 ]] || bad "Ctrl-C under launch/mpirun.sh: exit $rc, want 130: $(tail -3 "$D/t.out")"
grep -q "^stopped by SIGINT after step $s of 100000; checkpoint $D/t/ck/step_$(printf %08d "$s"); resume: launch/mpirun.sh -n 2 -- " "$D/t.out" ||
  bad "Ctrl-C under launch/mpirun.sh: no stop line at step $s: $(cat "$D/t.out")"
[[ -f "$D/t/ck/step_$(printf %08d "$s")/state.json" ]] || bad "Ctrl-C under launch/mpirun.sh: no checkpoint at step $s"

[[ $fails -eq 0 ]] && echo "stop signal test passed" || exit 1
