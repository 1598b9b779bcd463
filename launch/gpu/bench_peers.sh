#!/usr/bin/env bash
# Issue 19's table in one command, on one GPU: shardtrain (the `shardtrain train` binary, the same
# Trainer as a user's run) against its peers on the same workloads, with the ratio and the peak
# memory beside each. Builds nothing: BUILD must hold a built `shardtrain` (CUDA build for the GPU).
#   usage: launch/gpu/bench_peers.sh OUTDIR [gpt seed torch llmc ...]   (default: all four stages)
# Stages: gpt   shardtrain GPT-2 124M (T 1024): bf16 B64, bf16 B16, fp16 B16, each as a CUDA graph
#               (the default) and eager (--cuda-graph 0); bf16 B64 and fp16 B16 with --chunked-head 0
#         seed  shardtrain seed Transformer (vocab 10000, d 256, 8 heads, 6 layers, B 32, T 128,
#               Adam lr 1e-3, dropout 0.1): fp16, fp32 exact (--tf32 0), fp32 with --tf32 1 (graph),
#               fp16 and fp32 eager
#         torch the PyTorch peers: TORCH_BENCH (torch_gpt_bench.py; eager, compile) on the three
#               GPT rows, SEED_BENCH (seed_model_bench.py; eager, compile, compile + CUDA graphs);
#               torch-gpt and torch-seed run one half
#         llmc  LLMC_RUN (run_llmc.sh) at B 16 and 64 (bf16)
#         llama shardtrain Llama-3.2-1B's shapes (16 layers, C 2048, 32 heads, 8 key/value heads, FFN
#               8192, vocabulary 128256, tied head) in bf16 (graph, eager) and fp8 at T 2048, B LLAMA_B (4), then LLAMA_BENCH
#               (torch_llama_bench.py: HF LlamaForCausalLM, eager and compile) on the same shapes
# Peers are never part of the repository: their paths come from the environment (defaults under
# .carry/). Env: BUILD (build), DEVICE (cuda; cpu with TINY=1 checks the shardtrain command lines
# at tiny sizes), STEPS (20 timed), WARMUP (5), BUDGET_S (570: stage caps are cut to what is left),
# FP8_SCALING (delayed: the llama stage adds a row of fp8 with --fp8-scaling delayed).
# Our step time is the median of the timed steps' step_ms (--metrics), tokens/s = B·T / that;
# peak memory is mem_bytes (the allocator's peak since the start, warm-up included); PyTorch's is
# max_memory_allocated after its warm-up; seed_model_bench.py and llm.c print none ("—").
# Logs and results_STAGE.jsonl (one object per measured row) go to OUTDIR; the table of every stage
# found there to OUTDIR/table.md, so the stages may be split over several commands into one OUTDIR
# (all four may not fit one 10-minute command: e.g. `gpt seed torch`, then `llmc`).
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,21p "$0"; exit 2; }
OUT=$1; shift
stages=${*:-gpt seed torch llmc}
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
BUDGET_S=${BUDGET_S:-570}
TORCH_BENCH=${TORCH_BENCH:-.carry/torch_gpt_bench.py}
SEED_BENCH=${SEED_BENCH:-.carry/seed_model_bench.py}
LLMC_RUN=${LLMC_RUN:-.carry/run_llmc.sh}
LLAMA_BENCH=${LLAMA_BENCH:-.carry/torch_llama_bench.py}
LLAMA_B=${LLAMA_B:-4}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
cap() { local c=$(( BUDGET_S - SECONDS )); [ "$1" -lt "$c" ] && c=$1; echo $(( c > 5 ? c : 5 )); }
: > "$OUT/summary.txt"
note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  device $DEVICE"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
ST="$BUILD/shardtrain"
[ -x "$ST" ] || { echo "bench_peers: no $ST (build the shardtrain target first)"; exit 1; }

# sizes: the issue's, or tiny ones for a CPU check of the command lines
if [ "${TINY:-0}" = 1 ]; then
  GPT="--layers 2 --d-model 64 --heads 2 --vocab 512 --seq-len 32"; GT=32; GV=512; GB_BIG=4; GB=2
  SEED="--layers 2 --d-model 64 --heads 2 --vocab 1000 --seq-len 16"; SV=1000; SB=4; STT=16
  LLAMA="--layers 2 --d-model 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --seq-len 32"; LT=32; LV=512; LLAMA_B=2
else
  GPT="--layers 12 --d-model 768 --heads 12 --vocab 50304 --seq-len 1024"; GT=1024; GV=50257; GB_BIG=64; GB=16
  SEED="--layers 6 --d-model 256 --heads 8 --vocab 10000 --seq-len 128"; SV=10000; SB=32; STT=128
  LLAMA="--layers 16 --d-model 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq-len 2048"; LT=2048; LV=128256
fi

# random tokens in llm.c's .bin format, enough for every step of the largest batch without
# wrapping, and for llm.c's 40 steps at B 64
source launch/gpu/tokens.sh
GPT_TOK="$OUT/gpt_tokens.bin"; SEED_TOK="$OUT/seed_tokens.bin"; LLAMA_TOK="$OUT/llama_tokens.bin"

# one shardtrain run → one results.jsonl row. NAME WORKLOAD IMPL B T ARGS...
ours() {
  local name=$1 work=$2 impl=$3 b=$4 t=$5; shift 5
  local m="$OUT/$name.jsonl" t0=$SECONDS
  rm -f "$m"
  timeout "$(cap 150)" "$ST" train --device "$DEVICE" --micro-batch "$b" --steps $((WARMUP + STEPS)) --log-every 1000 \
    --progress 0 --metrics "$m" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "shardtrain $name rc=$rc ($((SECONDS - t0)) s)"
  [ $rc -eq 0 ] || { tail -3 "$OUT/$name.log"; return; }
  python3 - "$m" "$work" "$b" "$t" "$WARMUP" "$impl" <<'PY' >> "$res"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
b, t, w = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ms = statistics.median(r["step_ms"] for r in rows[w:])
print(json.dumps(dict(workload=sys.argv[2], impl=sys.argv[6], step_ms=round(ms, 3), tokens_per_s=round(b * t * 1e3 / ms),
                      peak_gib=round(max(r["mem_bytes"] for r in rows) / 2**30, 2),
                      act_peak_gib=round(max(r["mem_act_peak"] for r in rows) / 2**30, 2),
                      skipped=sum(r["skipped"] for r in rows[w:]), last_loss=round(rows[-1]["loss"], 4))))
PY
}

for stage in $stages; do
  res="$OUT/results_$stage.jsonl"  # this stage's rows (a later command may run the other stages)
  : > "$res"
  case $stage in
  gpt)
    [ -f "$GPT_TOK" ] || tokens "$GPT_TOK" "$GV" $(( (WARMUP + STEPS > 40 ? WARMUP + STEPS : 40) * GB_BIG * GT + 1 ))
    COMMON="--model gpt $GPT --data $GPT_TOK --lr 3e-4 --weight-decay 0.1 --clip 1"  # as torch_gpt_bench.py
    for g in 1 0; do  # the step as a CUDA graph (the default), then eager
      sfx=$([ $g = 1 ] && echo "" || echo "_eager"); impl=$([ $g = 1 ] && echo shardtrain || echo "shardtrain --cuda-graph 0")
      ours gpt_bf16_b$GB_BIG$sfx "gpt2 bf16 B$GB_BIG" "$impl" $GB_BIG $GT $COMMON --precision bf16 --cuda-graph $g
      ours gpt_bf16_b$GB$sfx "gpt2 bf16 B$GB" "$impl" $GB $GT $COMMON --precision bf16 --cuda-graph $g
      ours gpt_fp16_b$GB$sfx "gpt2 fp16 B$GB" "$impl" $GB $GT $COMMON --precision fp16 --cuda-graph $g
    done
    # the LM head unfused (full logits), to show what the chunked head (the default) costs or saves
    ours gpt_bf16_b${GB_BIG}_unchunked "gpt2 bf16 B$GB_BIG" "shardtrain --chunked-head 0" $GB_BIG $GT $COMMON --precision bf16 --chunked-head 0
    ours gpt_fp16_b${GB}_unchunked "gpt2 fp16 B$GB" "shardtrain --chunked-head 0" $GB $GT $COMMON --precision fp16 --chunked-head 0
    ;;
  seed)
    [ -f "$SEED_TOK" ] || tokens "$SEED_TOK" "$SV" $(( (WARMUP + STEPS) * SB * STT + 1 ))
    COMMON="--model simple-transformer $SEED --data $SEED_TOK --lr 1e-3 --weight-decay 0 --clip 0"  # Adam, as the seed
    ours seed_fp16 "seed fp16" shardtrain $SB $STT $COMMON --precision fp16 --cuda-graph 1
    ours seed_fp32 "seed fp32" shardtrain $SB $STT $COMMON --precision fp32 --tf32 0 --cuda-graph 1
    ours seed_fp32_tf32 "seed fp32" "shardtrain --tf32 1" $SB $STT $COMMON --precision fp32 --tf32 1 --cuda-graph 1
    ours seed_fp16_eager "seed fp16" "shardtrain --cuda-graph 0" $SB $STT $COMMON --precision fp16 --cuda-graph 0
    ours seed_fp32_eager "seed fp32" "shardtrain --cuda-graph 0" $SB $STT $COMMON --precision fp32 --tf32 0 --cuda-graph 0
    ;;
  torch|torch-gpt|torch-seed)
    if [ "$stage" != torch-seed ] && [ -f "$TORCH_BENCH" ]; then
      for row in "bf16 $GB_BIG" "bf16 $GB" "fp16 $GB"; do
        set -- $row
        t0=$SECONDS
        timeout "$(cap 240)" python3 "$TORCH_BENCH" $GPT --batch "$2" --dtype "$1" --modes eager,compile --steps "$STEPS" \
          --warmup "$WARMUP" > "$OUT/torch_gpt_$1_b$2.log" 2>&1
        note "torch_gpt_bench $1 B$2 rc=$? ($((SECONDS - t0)) s)"
        python3 - "$OUT/torch_gpt_$1_b$2.log" <<'PY' >> "$res"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    print(json.dumps(dict(workload="gpt2 %s B%d" % (r["dtype"], r["batch"]), impl=r["anchor"], step_ms=r["step_ms"],
                          tokens_per_s=r["tokens_per_s"], peak_gib=r["peak_mem_gib"])))
PY
      done
    elif [ "$stage" != torch-seed ]; then note "no TORCH_BENCH at $TORCH_BENCH: GPT PyTorch rows skipped"; fi
    if [ "$stage" != torch-gpt ] && [ -f "$SEED_BENCH" ]; then
      t0=$SECONDS
      timeout "$(cap 300)" python3 "$SEED_BENCH" > "$OUT/torch_seed.log" 2>&1
      note "seed_model_bench rc=$? ($((SECONDS - t0)) s)"
      python3 - "$OUT/torch_seed.log" <<'PY' >> "$res"
import json, sys
names = {"eager": "pytorch-eager", "default": "pytorch-compile", "reduce-overhead": "pytorch-compile+graphs"}
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    print(json.dumps(dict(workload="seed " + r["dtype"], impl=names.get(r["mode"], r["mode"]), step_ms=r["step_ms"],
                          tokens_per_s=r["tokens_per_s"], peak_gib=None)))
PY
    elif [ "$stage" != torch-gpt ]; then note "no SEED_BENCH at $SEED_BENCH: seed PyTorch rows skipped"; fi
    ;;
  llmc)
    if [ -f "$LLMC_RUN" ]; then
      [ -f "$GPT_TOK" ] || tokens "$GPT_TOK" 50257 $(( 40 * 64 * 1024 + 1 ))
      t0=$SECONDS
      timeout "$(cap 420)" bash "$LLMC_RUN" "$GPT_TOK" 16 64 > "$OUT/llmc.log" 2>&1
      note "llm.c rc=$? ($((SECONDS - t0)) s)"
      # "llm.c bf16 B=16: 612345 tok/s"
      sed -n 's/^llm.c \([a-z0-9]*\) B=\([0-9]*\): \([0-9.]*\) tok\/s$/\1 \2 \3/p' "$OUT/llmc.log" | while read -r dt b tok; do
        echo "{\"workload\": \"gpt2 $dt B$b\", \"impl\": \"llm.c\", \"step_ms\": $(python3 -c "print(round($b*1024e3/$tok, 3))"), \"tokens_per_s\": $tok, \"peak_gib\": null}"
      done >> "$res"
    else note "no LLMC_RUN at $LLMC_RUN: llm.c rows skipped"; fi
    ;;
  llama)
    # token ids over all of Llama 3's 128256-word vocabulary (a version-2 file: uint32 ids)
    [ -f "$LLAMA_TOK" ] || tokens "$LLAMA_TOK" "$LV" $(( (WARMUP + STEPS) * LLAMA_B * LT + 1 ))
    COMMON="--model llama $LLAMA --tie-embeddings 1 --data $LLAMA_TOK --lr 3e-4 --weight-decay 0.1 --clip 1"
    ours llama_bf16_b$LLAMA_B "llama-1b bf16 B$LLAMA_B" shardtrain $LLAMA_B $LT $COMMON --precision bf16
    ours llama_bf16_b${LLAMA_B}_eager "llama-1b bf16 B$LLAMA_B" "shardtrain --cuda-graph 0" $LLAMA_B $LT $COMMON \
      --precision bf16 --cuda-graph 0
    # issue 32: the blocks' GEMMs in FP8 (the head, attention and norms bf16), against its own bf16 row
    ours llama_fp8_b$LLAMA_B "llama-1b fp8 B$LLAMA_B" shardtrain $LLAMA_B $LT $COMMON --precision fp8
    # FP8_SCALING=delayed: the same with Transformer Engine's delayed scaling (--fp8-scaling delayed)
    [ "${FP8_SCALING:-current}" = delayed ] && ours llama_fp8d_b$LLAMA_B "llama-1b fp8 B$LLAMA_B" "shardtrain fp8-delayed" \
      $LLAMA_B $LT $COMMON --precision fp8 --fp8-scaling delayed
    if [ -f "$LLAMA_BENCH" ] && [ "$DEVICE" = cuda ]; then
      t0=$SECONDS
      timeout "$(cap 300)" python3 "$LLAMA_BENCH" --seq-len "$LT" --batch "$LLAMA_B" --dtype bf16 --modes eager,compile \
        --steps "$STEPS" --warmup "$WARMUP" > "$OUT/torch_llama.log" 2>&1
      note "torch_llama_bench rc=$? ($((SECONDS - t0)) s)"
      python3 - "$OUT/torch_llama.log" "$LLAMA_B" <<'PY' >> "$res"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    print(json.dumps(dict(workload="llama-1b bf16 B" + sys.argv[2], impl=r.get("anchor", r.get("mode")),
                          step_ms=r["step_ms"], tokens_per_s=r["tokens_per_s"], peak_gib=r.get("peak_mem_gib"))))
PY
    else note "no LLAMA_BENCH at $LLAMA_BENCH (or not CUDA): Llama PyTorch rows skipped"; fi
    ;;
  *) echo "bench_peers: unknown stage $stage (gpt seed torch torch-gpt torch-seed llmc llama)"; exit 2 ;;
  esac
done

# the table: per workload, ours first, then each peer; ratio = peer step time / ours (> 1: we are faster)
python3 - "$OUT"/results_*.jsonl <<'PY' | tee "$OUT/table.md"
import json, sys, collections
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip()]
goals = {"gpt2 bf16 B64": "≥ 650 k tok/s", "gpt2 bf16 B16": "≥ 600 k tok/s", "gpt2 fp16 B16": "≥ 600 k tok/s",
         "seed fp16": "≤ 2.5 ms", "seed fp32": "≤ 7.8 ms", "llama-1b bf16 B4": "≥ 1.25× torch.compile"}
by = collections.OrderedDict()
for r in rows: by.setdefault(r["workload"], []).append(r)
print("| workload | impl | tokens/s | step ms | peak GiB | peer ÷ ours (step time) | goal |")
print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
for w, rs in by.items():
    ours = next((r for r in rs if r["impl"] == "shardtrain"), None)
    for r in sorted(rs, key=lambda r: r["impl"] != "shardtrain"):
        ratio = f"{r['step_ms'] / ours['step_ms']:.2f}×" if ours and r is not ours else ("1.00×" if r is ours else "—")
        pk = "—" if r.get("peak_gib") is None else f"{r['peak_gib']:.2f}"
        goal = goals.get(w, "") if r is ours else ""
        print(f"| {w} | {r['impl']} | {r['tokens_per_s']:,} | {r['step_ms']:.2f} | {pk} | {ratio} | {goal} |")
PY
