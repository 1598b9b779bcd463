#!/usr/bin/env bash
# The first hour under mpirun, through launch/mpirun.sh as README.md runs it:
#   (1) a job's error is its one line: no "MPI_ABORT was invoked" banner, no ORTE_ERROR_LOG — a
#       bad flag (every rank), a refused --checkpoint-dir (a runtime error, every rank), one rank's
#       own error;
#   (2) `train --pp 2` without mpirun names the launch line, and that line trains;
#   (3) `plan --gpu-memory` prints train lines; the best one, run as printed, trains that layout;
#   (4) a resume under another rank count names the --micro-batch / --grad-accum that keep the
#       global batch, and those flags resume;
#   (5) dp 2 x pp 2: the step line shows the largest rank's memory (the last stage, with the head),
#       not rank 0's, as the metrics' mem_bytes_max; the trace names each rank's dp/tp/pp.
# Cost: ~10 launches of a 1- or 2-block GPT for 1-2 steps, ~30 s wall on 2 cores.
# usage: first_hour_mpi_test.sh REPO_ROOT SHARDTRAIN
set -uo pipefail
REPO="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cd "$REPO"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export SHARDTRAIN_PROGRESS=0 BIN
tiny=(--layers 2 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1)

# (1) one line each, nothing of Open MPI's
only_line() {  # only_line NAME REGEX -- command...: exit != 0, its whole output one line matching REGEX
  local name="$1" re="$2"
  shift 3
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || bad "$name: exit $rc"
  [[ $(grep -c . <<<"$out") -eq 1 ]] || bad "$name: not one line: $out"
  grep -Eq "$re" <<<"$out" || bad "$name: no line matching $re: $out"
}
only_line "bad flag" "^\[rank 0\] shardtrain: error: command line: flag --lr: expected a finite number, got 'abc'$" \
  -- launch/mpirun.sh -n 2 -- "$BIN" train --lr abc
"$BIN" train "${tiny[@]}" --steps 1 --checkpoint-dir "$D/taken" >/dev/null 2>&1 || bad "the run that takes $D/taken"
# a refusal after MPI is up (the layout line comes first on stdout: count the error lines apart)
out=$(timeout 120 launch/mpirun.sh -n 2 -- "$BIN" train "${tiny[@]}" --steps 1 --checkpoint-dir "$D/taken" 2>&1)
[[ $? -ne 0 ]] || bad "refused dir: exit 0"
[[ "$(grep -v '^layout: ' <<<"$out")" == "[rank 0] shardtrain: error: --checkpoint-dir $D/taken already holds 1 checkpoint"* ]] ||
  bad "refused dir: more than the layout line and the error: $out"
only_line "rank 1 only" "^\[rank 1\] shardtrain: error: command line: flag --lr" \
  -- launch/mpirun.sh -n 2 -- sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$BIN" train --lr abc; else exec "$BIN" train --steps 200 --log-every 1000; fi'

# (2) the launch line of a layout started without mpirun, run as printed
err=$("$BIN" train "${tiny[@]}" --pp 2 --steps 1 2>&1)
line=${err#*: run }
[[ "$line" == "launch/mpirun.sh -n 2 -- $BIN train ${tiny[*]} --pp 2 --steps 1" ]] || bad "--pp 2 alone: $err"
out=$(eval "$line" 2>&1) || bad "the printed line failed: $line: $out"
grep -q "^layout: world 2 = dp 1 x tp 1 x pp 2 " <<<"$out" || bad "the printed line: not pp 2: $out"

# (3) plan's best layout, run as printed (on the CPU: --device cpu given)
plan=$("$BIN" plan "${tiny[@]}" --grad-accum 2 --steps 1 --device cpu --gpu-memory 64MiB --world 2 2>&1) || bad "plan: $plan"
row=$(grep -E '^ +1 ' <<<"$plan" | awk '{print $2, $3, $4, $5}')  # dp cp tp pp
line=$(grep -E '^  #1  ' <<<"$plan" | sed 's/^  #1  //')
[[ "$line" == "launch/mpirun.sh -n 2 -- $BIN train "* ]] || bad "plan: no train line: $plan"
out=$(eval "$line" 2>&1) || bad "plan's line failed: $line: $out"
read -r dp cp tp pp <<<"$row"
want="dp $dp x tp $tp x pp $pp"
[[ "$cp" == 1 ]] || want="dp $dp x tp $tp x cp $cp x pp $pp"
grep -q "^layout: world 2 = $want " <<<"$out" || bad "plan's line ran another layout than $want: $out"

# (4) another rank count: the flags that keep the global batch (dp 2 x B 2 = 4), which then resume
launch/mpirun.sh -n 2 -- "$BIN" train "${tiny[@]}" --steps 1 --checkpoint-dir "$D/ck" >/dev/null 2>&1 || bad "2-rank run"
out=$("$BIN" train "${tiny[@]}" --steps 2 --checkpoint-dir "$D/ck" --resume 1 2>&1)
grep -q "shardtrain: error: --resume: $D/ck/step_00000001 has global batch 4 × seq-len 16, this run 2 × 16 (the data order would change); at dp 1, --micro-batch 2 --grad-accum 2 keep its 4 sequences$" <<<"$out" ||
  bad "resume at dp 1: $out"
out=$("$BIN" train "${tiny[@]}" --steps 2 --checkpoint-dir "$D/ck" --resume 1 --micro-batch 2 --grad-accum 2 2>&1)
grep -q "^resumed from $D/ck/step_00000001 at step 1$" <<<"$out" || bad "the named flags do not resume: $out"

# (5) dp 2 x pp 2: the largest rank's memory on the step line; the ranks' coordinates in the trace
out=$(launch/mpirun.sh -n 4 -- "$BIN" train "${tiny[@]}" --vocab 4096 --dp 2 --pp 2 --steps 1 --metrics "$D/m.jsonl" \
  --trace "$D/t.json" 2>&1) || bad "dp 2 x pp 2: $out"
python3 - "$D/m.jsonl" "$D/t.json" "$out" <<'PY' || bad "dp 2 x pp 2: the memory line or the trace's names"
import json, re, sys
m = json.loads(open(sys.argv[1]).readline())
# the last stage (ranks 2, 3) holds the head: more than rank 0
assert m["mem_bytes_max_rank"] in (2, 3) and m["mem_bytes_max"] > m["mem_bytes"], m
line = next(l for l in sys.argv[3].splitlines() if l.startswith("step 1/1"))
mib = m["mem_bytes_max"] / 2**20
want = f"| mem {mib:.1f} MiB on rank {m['mem_bytes_max_rank']}, the largest of 4 ("
assert want in line, (want, line)
names = sorted(e["args"]["name"] for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("name") == "process_name")
assert names == [f"rank {r} (dp {r % 2}, tp 0, pp {r // 2})" for r in range(4)], names
PY

[[ $fails -eq 0 ]] && echo "first hour mpi test passed" || exit 1
