#!/usr/bin/env bash
# A rank stopped during start-up (issue 55: the others waited in MPI_Init_thread forever): a
# 4-rank `shardtrain train` (tiny GPT, --dp 2 --pp 2, --timeout-s 10) under a real mpirun; rank V
# is SIGSTOPped 0.3 s after the launch, before its start-up can have ended. The job must end
# within the deadline + 5 s of the stop, not 0, its first "shardtrain: error:" line naming rank V
# as the one that has not arrived (launch/startup_watchdog.h). About 12 s.
# Usage: startup_stop_test.sh V MPIEXEC SHARDTRAIN   (the _strict twin runs it with SHARDTRAIN_P2P=strict)
set -u
V="$1"
MPIEXEC="$2"
BIN="$3"
export SHARDTRAIN_PROGRESS=0
TIMEOUT_S=10
source "$(dirname "$0")/stopped_rank.sh"  # WORK, cleanup, now_ms, rank_pid
die() { echo "FAIL (rank $V stopped at start-up): $*"; echo "--- output"; cat "$WORK/out" 2>/dev/null; exit 1; }

t_launch=$(now_ms)
"$MPIEXEC" --oversubscribe --allow-run-as-root -np 4 "$BIN" train --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 \
  --dp 2 --pp 2 --layers 2 --grad-accum 2 --steps 1000000 --log-every 1000 --comm mpi --timeout-s "$TIMEOUT_S" \
  > "$WORK/out" 2>&1 &
MPIRUN_PID=$!
while [[ -z "$VICTIM" ]]; do
  (( $(now_ms) - t_launch < 5000 )) || die "no process with OMPI_COMM_WORLD_RANK=$V under mpirun within 5 s"
  VICTIM=$(rank_pid "$V")
  [[ -n "$VICTIM" ]] || sleep 0.01
done
while (( $(now_ms) - t_launch < 300 )); do sleep 0.01; done
kill -STOP "$VICTIM" || die "could not stop rank $V ($VICTIM)"
t_stop=$(now_ms)
echo "rank $V (pid $VICTIM) stopped $(( t_stop - t_launch )) ms after the launch"
while kill -0 "$MPIRUN_PID" 2>/dev/null; do
  (( $(now_ms) - t_stop < (TIMEOUT_S + 30) * 1000 )) || die "the job still runs $(( TIMEOUT_S + 30 )) s after the stop"
  sleep 0.05
done
wait "$MPIRUN_PID"
RC=$?
MPIRUN_PID=""
elapsed=$(( $(now_ms) - t_stop ))
grep -q "^step " "$WORK/out" && die "a step ran: the stop came after start-up (the machine is too slow for this test's 0.3 s?)"
line=$(grep -a "shardtrain: error:" "$WORK/out" | head -1)
echo "the job ended ${elapsed} ms after the stop, exit $RC; first error line: $line"
[[ $RC -ne 0 ]] || die "exit 0 after a rank was stopped"
(( elapsed <= (TIMEOUT_S + 5) * 1000 )) || die "ended ${elapsed} ms after the stop: more than the deadline + 5 s"
[[ "$line" =~ shardtrain:\ error:\ start-up:\ .*\ did\ not\ complete\ within\ --timeout-s\ $TIMEOUT_S:\ rank\ $V\ has\ not\ arrived\ \( ]] ||
  die "the first error line does not name rank $V as the one that has not arrived"
echo PASS
