#!/usr/bin/env bash
# The GPU suite in one command, for the lent device machine (or any CUDA host): configure and
# build the CUDA targets, run the gpu-labelled tests, the benchmarks (ours, then PyTorch SDPA on
# the same attention shapes), and compute-sanitizer memcheck on the gpu tests. Every stage has a
# time cap so the whole run ends inside one 10-minute call; logs go to $OUT (default ./gpu_out).
#   usage: launch/gpu/run_gpu_suite.sh [build|test|bench|memcheck|comm ...]   (default: the first four)
# comm (opt-in, ~2 min after a build): the comm gpu tests and bench_comm_gpu under mpirun -np 1 and -np 2.
# memcheck shares what is left of BUDGET_S (default 570 s since the script started) among the tests.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
stages=${*:-build test bench memcheck}
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "date $(date -u +%FT%TZ)  commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$summary"

for stage in $stages; do
  case $stage in
  build)
    t0=$SECONDS
    { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$BUILD" -j"$JOBS" --target test_gpu_tensor test_gpu_ops test_gpu_ops_nn test_gpu_optim test_gpu_attention \
        test_gpu_attention_gqa test_gpu_gemm_lt test_gpu_trainer test_gpu_cuda_graph test_gpu_lm_head test_gpu_add_layernorm \
        test_gpu_rmsnorm test_gpu_swiglu test_gpu_fp8 test_gpu_fp8_mlp test_gpu_llama \
        bench_ops_cuda test_comm_nccl test_comm_mpi_cuda shardtrain \
        bench_dp_overlap bench_gpt_train
    } > "$OUT/build.log" 2>&1
    rc=$?
    note "build rc=$rc ($((SECONDS - t0)) s)"
    [ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }
    ;;
  test)
    t0=$SECONDS
    timeout 240 ctest --test-dir "$BUILD" -L gpu --output-on-failure > "$OUT/ctest.log" 2>&1
    note "ctest -L gpu rc=$? ($((SECONDS - t0)) s)"
    grep -E "tests passed|Failed|FAILED|Expected|Which is|error" "$OUT/ctest.log" | head -40
    ;;
  bench)
    t0=$SECONDS
    timeout 150 "$BUILD/tests/bench/bench_ops_cuda" > "$OUT/bench.log" 2>&1
    note "bench_ops_cuda rc=$? ($((SECONDS - t0)) s)"
    timeout 60 python3 tests/bench/bench_attention_torch.py >> "$OUT/bench.log" 2>&1
    note "torch sdpa rc=$?"
    cat "$OUT/bench.log"
    ;;
  memcheck)
    t0=$SECONDS
    : > "$OUT/memcheck.log"
    left=6
    for t in test_gpu_tensor test_gpu_optim test_gpu_ops test_gpu_ops_nn test_gpu_attention test_gpu_gemm_lt; do
      cap=$(( (${BUDGET_S:-570} - SECONDS) / left )); left=$((left - 1))
      [ $cap -ge 15 ] || { note "memcheck $t skipped: out of time"; continue; }
      timeout $cap compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
        "$BUILD/tests/gpu/$t" --gtest_filter=-GpuAllocator.OutOfMemory* >> "$OUT/memcheck.log" 2>&1
      note "memcheck $t rc=$?"
    done
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck.log" | sort | uniq -c | head -20
    note "memcheck ($((SECONDS - t0)) s)"
    ;;
  comm)
    t0=$SECONDS
    { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$BUILD" -j"$JOBS" --target test_comm test_comm_nccl test_comm_mpi_cuda bench_comm_gpu
    } > "$OUT/comm_build.log" 2>&1
    rc=$?
    note "comm build rc=$rc ($((SECONDS - t0)) s)"
    [ $rc -eq 0 ] || { tail -40 "$OUT/comm_build.log"; continue; }
    timeout 240 ctest --test-dir "$BUILD" -R "^test_comm_(np2|mpi_cuda_np2|nccl)$" --output-on-failure > "$OUT/comm_ctest.log" 2>&1
    note "comm ctest (test_comm_np2 incl. mpi_cuda, test_comm_mpi_cuda_np2, test_comm_nccl) rc=$?"
    grep -E "tests passed|Failed|FAILED|Expected|Which is|error" "$OUT/comm_ctest.log" | head -40
    for np in 1 2; do
      timeout 90 mpirun -np $np --oversubscribe --allow-run-as-root "$BUILD/tests/bench/bench_comm_gpu" \
        > "$OUT/bench_comm_gpu_np$np.log" 2>&1
      note "bench_comm_gpu -np $np rc=$?"
      cat "$OUT/bench_comm_gpu_np$np.log"
    done
    note "comm ($((SECONDS - t0)) s)"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
cat "$summary"
