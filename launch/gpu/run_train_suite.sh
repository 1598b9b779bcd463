#!/usr/bin/env bash
# End-to-end training on the lent GPU machine, in one command (≤ 10 min): build the CUDA targets,
# run the trainer-on-CUDA fidelity test (tests/gpu/test_gpu_trainer.cpp), the GPT-2 124M training
# benchmark (tests/bench/bench_gpt_train.cpp) and, in the same run, the PyTorch anchor with the
# same settings (eager, then torch.compile), then two MPI ranks sharing the one GPU (--comm mpi
# --dp 2) against one process on the same global batch. Logs go to $OUT (default ./gpu_out).
#   usage: TORCH_BENCH=path/to/torch_gpt_bench.py launch/gpu/run_train_suite.sh
# TEXT: a text file for the MPI runs' tokens (shardtrain prepare), default .carry/corpus.txt, else
# the built-in corpus. COMMIT: the commit to report when the tree has no .git.
# Settings: B (micro-batch, default 16), PREC (fp16; bf16 is tried when fp16 fails), STEPS (20),
# BUDGET_S (570: every stage's time cap is cut to what is left of it).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
B=${B:-16}
PREC=${PREC:-fp16}
STEPS=${STEPS:-20}
BUDGET_S=${BUDGET_S:-570}
TORCH_BENCH=${TORCH_BENCH:-.carry/torch_gpt_bench.py}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
cap() { local c=$(( BUDGET_S - SECONDS )); [ "$1" -lt "$c" ] && c=$1; echo $(( c > 5 ? c : 5 )); }

note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$summary"

# 1. build
t0=$SECONDS
{ cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
  timeout "$(cap 300)" cmake --build "$BUILD" -j"$JOBS" --target shardtrain test_gpu_trainer bench_gpt_train
} > "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc ($((SECONDS - t0)) s)"
[ $rc -eq 0 ] || { grep -E "error|Error" "$OUT/build.log" | head -30; cat "$summary"; exit 1; }

# 2. the trainer on CUDA vs transformers
t0=$SECONDS
timeout "$(cap 90)" "$BUILD/tests/gpu/test_gpu_trainer" > "$OUT/test.log" 2>&1
note "test_gpu_trainer rc=$? ($((SECONDS - t0)) s)"
grep -E "^\[  (PASSED|FAILED) |^\[ +OK|FAILED|Failure|max \||worst|step 5|Expected|Which is" "$OUT/test.log" | head -30 | tee -a "$summary"

# 3. several MPI ranks on the one GPU vs one process, same global batch (2 × 8 sequences)
DATA=""
if [ -f "${TEXT:-.carry/corpus.txt}" ]; then
  "$BUILD/shardtrain" prepare --text "${TEXT:-.carry/corpus.txt}" --out /tmp/st_corpus.bin 2>&1 | tee -a "$summary"
  DATA="--data /tmp/st_corpus.bin"
fi
SMALL="$DATA --device cuda --comm mpi --layers 4 --d-model 256 --heads 4 --vocab 256 --seq-len 128 --steps 20
       --lr 1e-3 --bucket-mb 1 --log-every 5 --progress 0"
t0=$SECONDS
timeout "$(cap 90)" mpirun -np 1 --allow-run-as-root --oversubscribe "$BUILD/shardtrain" train $SMALL --dp 1 \
  --micro-batch 8 --grad-accum 2 --metrics "$OUT/dp1.jsonl" > "$OUT/dp.log" 2>&1
note "one process (micro-batch 8 × grad-accum 2) rc=$? ($((SECONDS - t0)) s)"
t0=$SECONDS
timeout "$(cap 90)" mpirun -np 2 --allow-run-as-root --oversubscribe "$BUILD/shardtrain" train $SMALL --dp 2 \
  --micro-batch 8 --metrics "$OUT/dp2.jsonl" >> "$OUT/dp.log" 2>&1
note "mpirun -np 2 --dp 2 (micro-batch 8) rc=$? ($((SECONDS - t0)) s)"
grep -E "data parallel|backend|comm" "$OUT/dp.log" | head -6 | tee -a "$summary"
python3 - "$OUT/dp1.jsonl" "$OUT/dp2.jsonl" <<'EOF' 2>&1 | tee -a "$summary"
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
worst = 0.0
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        worst = max(worst, abs(x[k] - y[k]) / abs(x[k]))
print(f"dp2 vs dp1 over {len(a)} steps: worst relative difference (loss, grad_norm) {worst:.3g}; "
      f"step 1 loss {a[0]['loss']:.6f} / {b[0]['loss']:.6f}; step {len(a)} loss {a[-1]['loss']:.6f} / {b[-1]['loss']:.6f}; "
      f"tokens/s dp1 {a[-1]['tokens_per_s']:.0f}, dp2 {b[-1]['tokens_per_s']:.0f}")
EOF

# 4. GPT-2 124M training throughput: ours, then PyTorch (same shapes, dtype, steps)
t0=$SECONDS
timeout "$(cap 150)" "$BUILD/tests/bench/bench_gpt_train" --precision "$PREC" --micro-batch "$B" --steps "$STEPS" > "$OUT/bench.log" 2>&1
rc=$?
note "bench_gpt_train $PREC B=$B rc=$rc ($((SECONDS - t0)) s)"
if [ $rc -ne 0 ] && [ "$PREC" = fp16 ]; then
  tail -5 "$OUT/bench.log" | tee -a "$summary"
  PREC=bf16
  timeout "$(cap 150)" "$BUILD/tests/bench/bench_gpt_train" --precision "$PREC" --micro-batch "$B" --steps "$STEPS" >> "$OUT/bench.log" 2>&1
  note "bench_gpt_train $PREC B=$B rc=$?"
fi
grep -E "parameters|timed|peak|^\{" "$OUT/bench.log" | tee -a "$summary"
for mode in eager compile; do
  t0=$SECONDS
  timeout "$(cap 200)" python3 "$TORCH_BENCH" --layers 12 --d-model 768 --heads 12 --vocab 50304 --seq-len 1024 \
    --batch "$B" --dtype "$PREC" --modes "$mode" --steps "$STEPS" >> "$OUT/torch.log" 2>&1
  note "torch $mode rc=$? ($((SECONDS - t0)) s)"
done
grep "^{" "$OUT/torch.log" | tee -a "$summary"
tail -3 "$OUT/torch.log"
echo "=== summary"
cat "$summary"
