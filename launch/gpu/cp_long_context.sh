#!/usr/bin/env bash
# Issue 34 (Deliver 4) on the one-GPU machine: the Llama-3.2-1B shape at T 32768 (16 × 2048,
# 32 heads over 8 key/value heads, FFN 8192, vocabulary 128256, bf16, one sequence a step), ranks
# sharing the GPU through the MPI backend, each under --max-memory CAP GiB standing for a smaller GPU.
#   1. the ring's fused block attention against one rank's whole attention of the same length
#      (tests/bench/bench_ring_blocks: every cp rank's share, no transfers);
#   2. one rank under the cap: expect it to stop at the cap's line (the plan says it needs more);
#   3. one rank without the cap: its measured peak beside the plan's;
#   4. cp 4 (ZeRO-1, recompute) and cp 4 (ZeRO-3, recompute) under the same cap: they train; the
#      largest rank's peak (mem_bytes_max) beside the plan's.
# OUTDIR/summary.txt has one line per run; the logs are beside it.
#   usage: [BUILD=build] [CAP=24] [STEPS=3] [PARTS="bench one cp"] launch/gpu/cp_long_context.sh OUTDIR
# Builds shardtrain and bench_ring_blocks in BUILD (CUDA, sm_90) unless NOBUILD=1. TINY=1 runs the
# same commands at a tiny shape on the CPU (a check of the script, no GPU).
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,15p "$0"; exit 2; }
OUT=$1
BUILD=${BUILD:-build}
CAP=${CAP:-24}
STEPS=${STEPS:-3}
PARTS=${PARTS:-bench one cp}  # which of 1 (bench), 2-3 (one) and 4 (cp) run
want() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if [ "${NOBUILD:-0}" != 1 ]; then
  { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD" -j"${JOBS:-16}" --target shardtrain bench_ring_blocks; } > "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
fi
ST="$(pwd)/$BUILD/shardtrain"
if [ "${TINY:-0}" = 1 ]; then
  MODEL="--model llama --layers 2 --d-model 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 300 --seq-len 256"
  DEV=cpu; V=300; T=256; BENCH="cpu 256 4 1 4 2 16 f32 1"
else
  MODEL="--model llama --layers 16 --d-model 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq-len 32768"
  DEV=cuda; V=128256; T=32768; BENCH="cuda 32768 4 1 32 8 64 bf16 5"
fi
COMMON="$MODEL --micro-batch 1 --grad-accum 1 --precision bf16 --device $DEV --steps $STEPS --lr 3e-4"
MPI="mpirun -np 4 --oversubscribe --allow-run-as-root --bind-to none"

# 1. the block kernels
if want bench; then
  for backend in deterministic fast flash; do  # cuDNN (deterministic, then atomic-dQ backward), then the own flash kernels
    timeout 300 "$BUILD/tests/bench/bench_ring_blocks" $BENCH $backend > "$OUT/bench_ring_blocks_$backend.log" 2>&1
    note "bench_ring_blocks $backend (rc $?):"
    sed 's/^/  /' "$OUT/bench_ring_blocks_$backend.log" | tee -a "$OUT/summary.txt"
  done
fi

source launch/gpu/tokens.sh
tok="$OUT/tokens.bin"
tokens "$tok" "$V" $(( (STEPS + 1) * T + 1 ))
planned() {  # flags → the plan's largest rank peak, MiB
  "$ST" plan $COMMON "$@" 2>&1 | awk '/^[0-9]+ +[0-9]+ +[0-9]+ /{ if ($NF > m) m = $NF } END { print m }'
}
measured() {  # metrics.jsonl → the largest rank's peak (mem_bytes_max, else mem_bytes), MiB; steps; median step ms
  python3 - "$1" <<'PY'
import json, os, statistics, sys
p = sys.argv[1]
rows = [json.loads(l) for l in open(p) if l.strip().startswith("{") and '"loss"' in l] if os.path.exists(p) else []
if not rows: print("no steps"); sys.exit()
peak = max(r.get("mem_bytes_max", r.get("mem_bytes", 0)) for r in rows) / 2**20
ms = statistics.median(r.get("step_ms", float("nan")) for r in rows[1:] or rows)
print(f"{peak:.1f} MiB measured, {len(rows)} steps, loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}, step {ms:.0f} ms")
PY
}

# 2. one rank under the cap
if want one; then
log="$OUT/one_rank_cap.log"
timeout 300 "$ST" train $COMMON --data "$tok" --recompute 1 --max-memory "$CAP" > "$log" 2>&1
rc=$?
note "one rank, --recompute 1, --max-memory $CAP: rc $rc, plan $(planned --recompute 1) MiB; its last line:"
note "  $(grep -v '^\s*$' "$log" | tail -1)"

# 3. one rank without the cap
m="$OUT/one_rank.jsonl"; rm -f "$m"
timeout 300 "$ST" train $COMMON --data "$tok" --recompute 1 --metrics "$m" > "$OUT/one_rank.log" 2>&1
note "one rank, --recompute 1, no cap: rc $?, plan $(planned --recompute 1) MiB, $(measured "$m")"
fi

# 4. cp 4 under the cap
want cp && for zero in 1 3; do
  m="$OUT/cp4_zero$zero.jsonl"; rm -f "$m"
  flags="--cp 4 --zero $zero --recompute 1"
  timeout 420 $MPI "$ST" train $COMMON --data "$tok" $flags --comm mpi --max-memory "$CAP" --metrics "$m" \
    > "$OUT/cp4_zero$zero.log" 2>&1
  note "cp 4, --zero $zero --recompute 1, --max-memory $CAP: rc $?, plan $(planned $flags) MiB a rank, $(measured "$m")"
  grep -E "error|cap|stopped" "$OUT/cp4_zero$zero.log" | head -3 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
done
