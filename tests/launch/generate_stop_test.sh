#!/usr/bin/env bash
# generate --tp 2 with a rank stopped mid-generation ends within --timeout-s (issue 55: it waited a
# fixed 300 s, generate had no --timeout-s): a 1-layer GPT of context 1024 trained one step,
# `generate --tp 2 --cache 0 --max-new-tokens 400 --timeout-s 3` under a real mpirun (~16 tokens/s
# here); once rank 0 has printed tokens, rank 1 is SIGSTOPped. The job must end within the
# deadline + 10 s of the stop (the diagnosis window and the abort), not 0, its first error line
# naming rank 1 as the rank behind. About 20 s. Usage: generate_stop_test.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
export SHARDTRAIN_PROGRESS=0
TIMEOUT_S=3
source "$(dirname "$0")/stopped_rank.sh"  # WORK, cleanup, now_ms, rank_pid
die() { echo "FAIL: $*"; echo "--- output"; cat "$WORK/out" 2>/dev/null; exit 1; }

"$BIN" train --layers 1 --d-model 32 --heads 2 --seq-len 1024 --micro-batch 1 --steps 1 --checkpoint-dir "$WORK/ck" \
  > "$WORK/train.out" 2>&1 || { cat "$WORK/train.out"; die "training the checkpoint failed"; }
"$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 "$BIN" generate --checkpoint "$WORK/ck" --tp 2 --prompt ab \
  --max-new-tokens 400 --cache 0 --timeout-s "$TIMEOUT_S" > "$WORK/out" 2>&1 &
MPIRUN_PID=$!
t0=$(now_ms)
while (( $(wc -c < "$WORK/out") < 12 )); do  # "ab" and some tokens streamed by rank 0
  kill -0 "$MPIRUN_PID" 2>/dev/null || die "the job ended before generating"
  (( $(now_ms) - t0 < 60000 )) || die "no tokens within 60 s"
  sleep 0.05
done
VICTIM=$(rank_pid 1)
[[ -n "$VICTIM" ]] || die "no process with OMPI_COMM_WORLD_RANK=1 under mpirun $MPIRUN_PID"
kill -STOP "$VICTIM"
t_stop=$(now_ms)
while kill -0 "$MPIRUN_PID" 2>/dev/null; do
  (( $(now_ms) - t_stop < (TIMEOUT_S + 60) * 1000 )) || die "the job still runs $(( TIMEOUT_S + 60 )) s after the stop"
  sleep 0.05
done
wait "$MPIRUN_PID"
RC=$?
MPIRUN_PID=""
elapsed=$(( $(now_ms) - t_stop ))
line=$(grep -a "shardtrain: error:" "$WORK/out" | head -1)
echo "the job ended ${elapsed} ms after the stop, exit $RC; first error line: $line"
[[ $RC -ne 0 ]] || die "exit 0 after a rank was stopped"
(( elapsed <= (TIMEOUT_S + 10) * 1000 )) || die "ended ${elapsed} ms after the stop: more than --timeout-s $TIMEOUT_S + 10 s"
[[ "$line" == *"rank 1 is behind"* ]] || die "the first error line does not name rank 1 as the rank behind"
echo PASS
