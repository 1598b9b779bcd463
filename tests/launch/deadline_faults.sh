#!/usr/bin/env bash
# One deadline, one diagnosis naming the right rank, whichever rank stops, in every layout: a
# 4-rank `shardtrain train` (tiny GPT, --timeout-s 2) under a real mpirun; after step 3 one rank
# is SIGSTOPped (it can no longer answer anything). The job must end within the deadline + the
# diagnosis window + 30 s, with exactly one "shardtrain: error:" line, "comm deadline: rank V is
# behind: no answer ..." for the stopped rank V, printed by rank 0 (by rank 1 when rank 0 is the
# one stopped). Every rank 0..3 is stopped in turn. The first case also asks for
# --flight-recorder-dump: the three answering ranks' rings must be there as JSON, the stopped
# rank's not (it cannot answer).
#   pp4       --pp 4 (a waiting pipeline neighbour must not be blamed: the line follows its wait)
#   dp2tp2    --dp 2 --tp 2
#   dp2pp2    --dp 2 --pp 2
# Each case takes about 6 s (2 s deadline, 2 s window, start-up); the layout ~25 s.
# Usage: deadline_faults.sh LAYOUT MPIEXEC SHARDTRAIN
set -u
LAYOUT="$1"
MPIEXEC="$2"
BIN="$3"
export SHARDTRAIN_PROGRESS=0
TIMEOUT_S=2
source "$(dirname "$0")/stopped_rank.sh"  # WORK, cleanup, now_ms, rank_pid
die() { echo "FAIL ($LAYOUT, rank ${V:-?} stopped): $*"; echo "--- output"; cat "$WORK/out" 2>/dev/null; exit 1; }

case "$LAYOUT" in
  pp4) LAYOUT_ARGS=(--pp 4 --layers 4 --grad-accum 2) ;;
  dp2tp2) LAYOUT_ARGS=(--dp 2 --tp 2 --layers 1) ;;
  dp2pp2) LAYOUT_ARGS=(--dp 2 --pp 2 --layers 2 --grad-accum 2) ;;
  *) echo "unknown layout $LAYOUT"; exit 2 ;;
esac
TINY=(--d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1000 --comm mpi)


for V in 0 1 2 3; do
  rm -rf "$WORK/m.jsonl" "$WORK/dump"
  DUMP=()
  [[ $V -eq 0 ]] && DUMP=(--flight-recorder-dump "$WORK/dump")
  "$MPIEXEC" --oversubscribe --allow-run-as-root -np 4 "$BIN" train "${TINY[@]}" "${LAYOUT_ARGS[@]}" \
    --steps 1000000 --timeout-s "$TIMEOUT_S" --metrics "$WORK/m.jsonl" "${DUMP[@]}" > "$WORK/out" 2>&1 &
  MPIRUN_PID=$!
  t0=$(now_ms)
  while (( $( (wc -l < "$WORK/m.jsonl") 2>/dev/null || echo 0) < 3 )); do
    kill -0 "$MPIRUN_PID" 2>/dev/null || die "the job ended before step 3"
    (( $(now_ms) - t0 < 120000 )) || die "no step 3 within 120 s"
    sleep 0.05
  done
  VICTIM=$(rank_pid "$V")
  [[ -n "$VICTIM" ]] || die "no process with OMPI_COMM_WORLD_RANK=$V under mpirun $MPIRUN_PID"
  kill -STOP "$VICTIM"
  t0=$(now_ms)
  while kill -0 "$MPIRUN_PID" 2>/dev/null; do
    (( $(now_ms) - t0 < (2 * TIMEOUT_S + 30) * 1000 )) || die "the job still runs $(( 2 * TIMEOUT_S + 30 )) s after the stop"
    sleep 0.1
  done
  wait "$MPIRUN_PID"
  RC=$?
  MPIRUN_PID=""
  kill -CONT "$VICTIM" 2>/dev/null; kill -KILL "$VICTIM" 2>/dev/null
  VICTIM=""
  elapsed=$(( $(now_ms) - t0 ))
  [[ $RC -ne 0 ]] || die "exit 0 after a rank was stopped"
  errors=$(grep -c "shardtrain: error:" "$WORK/out")
  line=$(grep "shardtrain: error:" "$WORK/out" | head -1)
  echo "$LAYOUT, rank $V stopped: ended after $elapsed ms: $line"
  [[ $errors -eq 1 ]] || die "$errors error lines, not one"
  reporter=0
  [[ $V -eq 0 ]] && reporter=1
  [[ "$line" == "[rank $reporter] shardtrain: error: comm deadline: rank $V is behind: no answer"* ]] ||
    die "the line does not name rank $V as behind, printed by rank $reporter"
  if [[ $V -eq 0 ]]; then
    for r in 1 2 3; do
      [[ -s "$WORK/dump/flight_recorder_rank$r.json" ]] || die "no flight recorder of rank $r in the dump"
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['rank']==$r and j['groups'], j" \
        "$WORK/dump/flight_recorder_rank$r.json" || die "rank $r's dump is not its report"
    done
    [[ ! -e "$WORK/dump/flight_recorder_rank0.json" ]] || die "a dump for the stopped rank 0"
  fi
done
echo PASS
