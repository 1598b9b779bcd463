#!/usr/bin/env bash
# Every layout on the one lent GPU, in one command (≤ 10 min): builds shardtrain and the gpu
# tests, runs `ctest -L gpu`, then trains a small GPT with --device cuda as one process and as
# dp 2, pp 2 (gpipe and 1f1b), tp 2, and dp 2 with --zero 1 (ranks share the GPU through the MPI
# backend) and compares every layout's loss and grad norm with the one-process curve.
# Logs and the comparison go to $OUT (default ./gpu_out).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
echo "date $(date -u +%FT%TZ) commit ${COMMIT:-unknown}" | tee "$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
t0=$SECONDS
{ cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
  timeout 360 cmake --build "$BUILD" -j16 --target shardtrain test_gpu_tensor test_gpu_ops test_gpu_ops_nn \
    test_gpu_optim test_gpu_trainer test_comm_nccl 2>&1; } > "$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS - t0)) s)" | tee -a "$OUT/summary.txt"
timeout 120 ctest --test-dir "$BUILD" -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1
echo "ctest -L gpu rc=$?: $(grep -E 'tests passed' "$OUT/ctest_gpu.log")" | tee -a "$OUT/summary.txt"
python3 - <<'PY' > "$OUT/tokens.txt"
import random
random.seed(1)
words = "the of and to in is was that for on with as by at from his her it an be this are".split()
print(" ".join(random.choice(words) for _ in range(60000)))
PY
"$BUILD/shardtrain" prepare --text "$OUT/tokens.txt" --out "$OUT/tokens.bin" > /dev/null
C="--model gpt --layers 4 --d-model 128 --heads 4 --vocab 256 --seq-len 64 --steps 8 --device cuda --comm mpi
   --data $OUT/tokens.bin --progress 0 --log-every 100 --lr 1e-3 --weight-decay 0.1"
run() {  # name np extra-flags...
  local name=$1 np=$2; shift 2
  timeout 60 mpirun -np "$np" --oversubscribe "$BUILD/shardtrain" train $C --metrics "$OUT/$name.jsonl" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?" >> "$OUT/summary.txt"
}
run one 1 --micro-batch 4 --grad-accum 4
run dp2 2 --dp 2 --micro-batch 4 --grad-accum 2
run pp2_gpipe 2 --pp 2 --micro-batch 4 --grad-accum 4 --schedule gpipe
run pp2_1f1b 2 --pp 2 --micro-batch 4 --grad-accum 4 --schedule 1f1b
run tp2 2 --tp 2 --micro-batch 4 --grad-accum 4
run dp2_zero 2 --dp 2 --zero 1 --micro-batch 4 --grad-accum 2
run one_bf16 1 --micro-batch 4 --grad-accum 4 --precision bf16
run pp2_bf16 2 --pp 2 --micro-batch 4 --grad-accum 4 --precision bf16
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys, os
out = sys.argv[1]
def curve(n):
    p = os.path.join(out, n + ".jsonl")
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
ref = curve("one")
for name, base in [("dp2", "one"), ("pp2_gpipe", "one"), ("pp2_1f1b", "one"), ("tp2", "one"), ("dp2_zero", "one"), ("pp2_bf16", "one_bf16")]:
    c, r = curve(name), curve(base)
    if len(c) != len(r) or not r:
        print(f"{name}: {len(c)} steps vs {len(r)}"); continue
    e = max(max(abs(a["loss"] - b["loss"]) / abs(b["loss"]), abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])) for a, b in zip(c, r))
    print(f"{name} vs {base}: max rel diff {e:.2e} over {len(c)} steps; last loss {c[-1]['loss']:.6f}, mem {c[-1]['mem_bytes']/2**20:.1f} MiB, mfu {c[-1]['mfu']:.4f}")
PY
