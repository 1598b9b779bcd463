#!/usr/bin/env bash
# Where a training step's time goes, on the lent GPU (no nsys there): for each workload,
#   1. the step's wall time, eager (--cuda-graph 0) and as a CUDA graph (--cuda-graph 1): the
#      median step_ms of the timed steps of a `shardtrain train` run (--metrics);
#   2. one eager step under Nsight Compute (gpu__time_duration per kernel, clocks left alone),
#      its kernels summed per op family (GEMM, attention, layernorm, cross-entropy, ...).
# The table: kernel time per family against the wall time; wall − Σ kernels is the time the GPU
# waited for the host (launch gaps, host reads) — what the graph exists to remove.
#   usage: launch/gpu/profile_step.sh OUTDIR [gpt-fp16 gpt-bf16 gpt-fp8 gpt-fp8d gpt-bf16-b64 llama-bf16 llama-fp8d seed-fp16 seed-fp32 ...]
# Workloads (the peers' shapes, launch/gpu/bench_peers.sh): gpt-* GPT-2 124M, T 1024, B 16 (b64: 64;
# fp8d: --precision fp8 --fp8-scaling delayed, as llama-fp8d);
# llama-bf16 Llama-3.2-1B's shapes, T 2048, B 4 (LLAMA_LAYERS of its 16 blocks: under Nsight Compute
# the 16 took over 5 minutes; the blocks are alike, so 4 show the per-block mix);
# seed-* the seed's Transformer (vocab 10000, d 256, 8 heads, 6 layers, B 32, T 128, dropout 0.1).
# Env: BUILD (build; a built shardtrain), STEPS (10 timed after 4 warm-up), TINY=1 (tiny shapes on
# the CPU: checks the command lines and the parser, no ncu). Writes OUTDIR/profile_<w>.txt, and
# the table of all to OUTDIR/profile.md.
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,16p "$0"; exit 2; }
OUT=$1; shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
works=${*:-gpt-fp16 gpt-bf16 seed-fp16 seed-fp32}
BUILD=${BUILD:-build}
STEPS=${STEPS:-10}
WARM=4
ST="$BUILD/shardtrain"
[ -x "$ST" ] || { echo "profile_step: no $ST (build the shardtrain target first)"; exit 1; }
source launch/gpu/tokens.sh
DEVICE=cuda
if [ "${TINY:-0}" = 1 ]; then
  DEVICE=cpu
  GPT="--layers 2 --d-model 64 --heads 2 --vocab 512 --seq-len 32"; GV=512; GT=32; GB=2
  SEED="--layers 2 --d-model 64 --heads 2 --vocab 1000 --seq-len 16"; SV=1000; ST_T=16; SB=4
  LLAMA="--layers 2 --d-model 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --seq-len 32"; LV=512; LT=32; LB=2
else
  GPT="--layers 12 --d-model 768 --heads 12 --vocab 50304 --seq-len 1024"; GV=50257; GT=1024; GB=16
  SEED="--layers 6 --d-model 256 --heads 8 --vocab 10000 --seq-len 128"; SV=10000; ST_T=128; SB=32
  # Llama-3.2-1B's shapes (bench_peers.sh llama); token ids over its whole vocabulary (uint32 file)
  LLAMA="--layers ${LLAMA_LAYERS:-16} --d-model 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq-len 2048"; LV=128256; LT=2048; LB=4
fi
: > "$OUT/profile.md"

median_ms() {  # METRICS.jsonl → median step_ms after the warm-up
  python3 - "$1" "$WARM" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
print(round(statistics.median(r["step_ms"] for r in rows), 3) if rows else "nan")
PY
}

for w in $works; do
  case $w in
    gpt-fp16) args="--model gpt $GPT --micro-batch $GB --precision fp16 --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/gpt_tokens.bin; v=$GV; n=$((GB * GT * 40)) ;;
    gpt-bf16) args="--model gpt $GPT --micro-batch $GB --precision bf16 --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/gpt_tokens.bin; v=$GV; n=$((GB * GT * 40)) ;;
    gpt-bf16-b64) args="--model gpt $GPT --micro-batch $((GB * 4)) --precision bf16 --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/gpt_tokens_b64.bin; v=$GV; n=$((GB * 4 * GT * 40)) ;;
    gpt-fp8) args="--model gpt $GPT --micro-batch $GB --precision fp8 --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/gpt_tokens.bin; v=$GV; n=$((GB * GT * 40)) ;;
    gpt-fp8d) args="--model gpt $GPT --micro-batch $GB --precision fp8 --fp8-scaling delayed --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/gpt_tokens.bin; v=$GV; n=$((GB * GT * 40)) ;;
    llama-bf16) args="--model llama $LLAMA --tie-embeddings 1 --micro-batch $LB --precision bf16 --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/llama_tokens.bin; v=$LV; n=$((LB * LT * 40)) ;;
    llama-fp8d) args="--model llama $LLAMA --tie-embeddings 1 --micro-batch $LB --precision fp8 --fp8-scaling delayed --lr 3e-4 --weight-decay 0.1 --clip 1"; tok=$OUT/llama_tokens.bin; v=$LV; n=$((LB * LT * 40)) ;;
    seed-fp16) args="--model simple-transformer $SEED --micro-batch $SB --precision fp16 --lr 1e-3 --weight-decay 0 --clip 0"; tok=$OUT/seed_tokens.bin; v=$SV; n=$((SB * ST_T * 40)) ;;
    seed-fp32) args="--model simple-transformer $SEED --micro-batch $SB --precision fp32 --lr 1e-3 --weight-decay 0 --clip 0"; tok=$OUT/seed_tokens.bin; v=$SV; n=$((SB * ST_T * 40)) ;;
    *) echo "profile_step: unknown workload $w"; exit 2 ;;
  esac
  [ -f "$tok" ] || tokens "$tok" "$v" $((n + 1))
  common="$args --device $DEVICE --data $tok --log-every 1000 --progress 0"
  walls=""
  for g in 0 1; do
    rm -f "$OUT/${w}_g$g.jsonl"
    timeout 200 "$ST" train $common --steps $((WARM + STEPS)) --cuda-graph $g --metrics "$OUT/${w}_g$g.jsonl" \
      > "$OUT/${w}_g$g.log" 2>&1 || { echo "$w --cuda-graph $g failed:"; tail -3 "$OUT/${w}_g$g.log"; }
    walls="$walls $( [ -s "$OUT/${w}_g$g.jsonl" ] && median_ms "$OUT/${w}_g$g.jsonl" || echo nan)"
  done
  if [ "$DEVICE" = cuda ]; then
    timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      "$ST" train $common --steps 2 --cuda-graph 0 > "$OUT/ncu_$w.csv" 2> "$OUT/ncu_$w.err"
    echo "ncu $w rc=$?"
  fi
  python3 launch/gpu/profile_table.py "$w" "$OUT/ncu_$w.csv" $walls | tee "$OUT/profile_$w.txt" >> "$OUT/profile.md"
done
cat "$OUT/profile.md"
