#!/usr/bin/env bash
# A rank that dies or stops never leaves the job hanging, and a checkpoint cut short never costs
# the previous one. Two ranks (dp 2) under a real mpirun; the test picks a rank by
# OMPI_COMM_WORLD_RANK among mpirun's own children and signals that one process.
#   kill        rank 1 SIGKILLed after step 3: the job ends (exit != 0) within --timeout-s + 30 s
#   stop        rank 1 SIGSTOPped after step 3: the job ends within --timeout-s + 30 s and rank 0
#               prints the deadline's one diagnosis naming rank 1 ("comm deadline: rank 1 is
#               behind: no answer ...": the deadline, then the side channel's window, so ~2 ×
#               --timeout-s; deadline_faults.sh stops every rank of three 4-rank layouts)
#   checkpoint  rank 0 SIGKILLed while a checkpoint is being written (its temporary directory seen,
#               the process stopped, the directory checked still temporary, then killed): the
#               newest complete checkpoint resumes and trains on to exit 0
# Usage: rank_faults.sh MODE MPIEXEC SHARDTRAIN
set -u
MODE="$1"
MPIEXEC="$2"
BIN="$3"
export SHARDTRAIN_PROGRESS=0
TIMEOUT_S=5
source "$(dirname "$0")/stopped_rank.sh"  # WORK, cleanup, now_ms, rank_pid
die() { echo "FAIL: $*"; echo "--- output"; cat "$WORK/out" 2>/dev/null; exit 1; }

# waits until FILE has at least N lines (the metrics file, flushed every step)
wait_lines() {
  local file="$1" n="$2" t0
  t0=$(now_ms)
  while (( $( (wc -l < "$file") 2>/dev/null || echo 0) < n )); do
    kill -0 "$MPIRUN_PID" 2>/dev/null || die "the job ended before step $n"
    (( $(now_ms) - t0 < 120000 )) || die "no step $n within 120 s"
    sleep 0.05
  done
}
# waits for mpirun to end within $1 ms; sets RC
wait_job() {
  local limit="$1" t0
  t0=$(now_ms)
  while kill -0 "$MPIRUN_PID" 2>/dev/null; do
    (( $(now_ms) - t0 < limit )) || die "the job still runs $limit ms after the fault"
    sleep 0.1
  done
  wait "$MPIRUN_PID"
  RC=$?
  ELAPSED=$(( $(now_ms) - t0 ))
  MPIRUN_PID=""
}
start() {  # start ARGS...: the job in the background, output in $WORK/out
  "$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 "$BIN" train "$@" > "$WORK/out" 2>&1 &
  MPIRUN_PID=$!
}

TINY=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1000)
case "$MODE" in
  kill|stop)
    start "${TINY[@]}" --steps 1000000 --timeout-s "$TIMEOUT_S" --metrics "$WORK/m.jsonl"
    wait_lines "$WORK/m.jsonl" 3
    VICTIM=$(rank_pid 1)
    [[ -n "$VICTIM" ]] || die "no process with OMPI_COMM_WORLD_RANK=1 under mpirun $MPIRUN_PID"
    if [[ "$MODE" == kill ]]; then kill -KILL "$VICTIM"; else kill -STOP "$VICTIM"; fi
    wait_job $(( (TIMEOUT_S + 30) * 1000 ))
    echo "job ended $ELAPSED ms after SIG${MODE^^} of rank 1 (pid $VICTIM), exit $RC"
    [[ $RC -ne 0 ]] || die "exit 0 after a rank was ${MODE}ed"
    if [[ "$MODE" == stop ]]; then
      line=$(grep -E "^\[rank 0\] shardtrain: error: " "$WORK/out" | head -1)
      echo "rank 0: $line"
      echo "$line" | grep -qiE "timed out|timeout|deadline" || die "rank 0 printed no timeout line"
      (( ELAPSED >= (TIMEOUT_S - 1) * 1000 )) || die "ended after $ELAPSED ms, before the $TIMEOUT_S s deadline"
      echo "$line" | grep -q "comm deadline: rank 1 is behind" || die "rank 0's line does not name the stuck rank 1"
    fi
    ;;
  checkpoint)
    CK="$WORK/ckpt"
    # ~3.3 M parameters: ~40 MB of weights and AdamW state per checkpoint, written with fsync
    BIG=(--layers 4 --d-model 256 --heads 4 --seq-len 32 --micro-batch 1 --log-every 1000 --checkpoint-dir "$CK"
         --checkpoint-every 1 --keep-checkpoints 0 --timeout-s 60)
    start "${BIG[@]}" --steps 1000000 --metrics "$WORK/m.jsonl"
    t0=$(now_ms)
    until compgen -G "$CK/step_*" > /dev/null; do  # one complete checkpoint first
      kill -0 "$MPIRUN_PID" 2>/dev/null || die "the job ended before its first checkpoint"
      (( $(now_ms) - t0 < 120000 )) || die "no checkpoint within 120 s"
      sleep 0.01
    done
    VICTIM=$(rank_pid 0)
    [[ -n "$VICTIM" ]] || die "no process with OMPI_COMM_WORLD_RANK=0 under mpirun $MPIRUN_PID"
    caught=""
    t0=$(now_ms)
    while [[ -z "$caught" ]]; do
      (( $(now_ms) - t0 < 120000 )) || die "never caught rank 0 inside a checkpoint in 120 s"
      kill -0 "$VICTIM" 2>/dev/null || die "rank 0 ended by itself"
      if compgen -G "$CK/.tmp-*" > /dev/null; then
        kill -STOP "$VICTIM"
        if compgen -G "$CK/.tmp-*" > /dev/null; then caught=$(compgen -G "$CK/.tmp-*" | head -1); else kill -CONT "$VICTIM"; fi
      fi
    done
    kill -KILL "$VICTIM"
    echo "rank 0 killed while writing $(basename "$caught")"
    wait_job 60000
    [[ $RC -ne 0 ]] || die "exit 0 after rank 0 was killed"
    newest=$(ls "$CK" | grep -E '^step_[0-9]{8}$' | sort | tail -1)
    [[ -n "$newest" ]] || die "no complete checkpoint left (killed during the first one?)"
    step=$((10#${newest#step_}))
    echo "newest complete checkpoint: $newest"
    "$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 "$BIN" train "${BIG[@]}" --steps $((step + 2)) --resume 1 \
      > "$WORK/out" 2>&1
    RC=$?
    [[ $RC -eq 0 ]] || die "resume from $newest exited $RC"
    grep -q "resumed from $CK/$newest at step $step" "$WORK/out" || die "did not resume from $newest"
    [[ -d "$CK/step_$(printf %08d $((step + 2)))" ]] || die "the resumed run wrote no checkpoint at step $((step + 2))"
    ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
echo PASS
