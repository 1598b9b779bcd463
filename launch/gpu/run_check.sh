#!/usr/bin/env bash
# One device call that checks a change end to end on the lent GPU, most important first, inside
# one 10-minute command: build (the CUDA targets the tests and benches need), the gpu tests,
# shardtrain's own rows of issue 19's table (launch/gpu/bench_peers.sh gpt seed), then, as time
# allows, the seed model's PyTorch peers (torch-seed) and the planner against the GPU
# (launch/gpu/run_memory_gpu.sh plan). Every stage is capped by what is left of BUDGET_S.
#   usage: OUT=dir launch/gpu/run_check.sh [build test bench peers plan]   (default: all five)
# Env: BUILD (build), JOBS (16), BUDGET_S (570), TESTS (a ctest -R regex; default every gpu test
# but the comm ones, which need their own mpirun stage: launch/gpu/run_gpu_suite.sh comm).
# Writes OUT/summary.txt, OUT/ctest.log, OUT/table.md, OUT/memory_summary.txt and OUT/bench.tgz
# (every bench log and result).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-570}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
stages=${*:-build test bench peers plan}
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
left() { echo $(( BUDGET_S - SECONDS )); }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$summary"
BP=/tmp/run_check_bench
rm -rf "$BP"
for stage in $stages; do
  [ "$(left)" -gt 20 ] || { note "$stage: skipped (out of time)"; continue; }
  t0=$SECONDS
  case $stage in
  build)
    { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
      timeout "$(left)" cmake --build "$BUILD" -j"$JOBS" --target shardtrain test_gpu_tensor test_gpu_ops \
        test_gpu_ops_nn test_gpu_optim test_gpu_attention test_gpu_gemm_lt test_gpu_trainer test_gpu_cuda_graph \
        test_gpu_lm_head test_gpu_add_layernorm test_gpu_rmsnorm test_gpu_swiglu test_gpu_fp8 bench_gpt_train bench_ops_cuda
    } > "$OUT/build.log" 2>&1
    rc=$?
    note "build rc=$rc ($((SECONDS - t0)) s)"
    [ $rc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
    ;;
  test)
    timeout "$(left)" ctest --test-dir "$BUILD" -L gpu -R "${TESTS:-.}" -E comm --output-on-failure > "$OUT/ctest.log" 2>&1
    note "ctest -L gpu (but comm) rc=$? ($((SECONDS - t0)) s)"
    grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$OUT/ctest.log" | tee -a "$summary"
    ;;
  bench)
    BUDGET_S=$(left) launch/gpu/bench_peers.sh "$BP" gpt seed > "$OUT/bench.log" 2>&1
    note "bench ours rc=$? ($((SECONDS - t0)) s)"
    ;;
  peers)
    BUDGET_S=$(left) launch/gpu/bench_peers.sh "$BP" torch-seed >> "$OUT/bench.log" 2>&1
    note "bench torch-seed rc=$? ($((SECONDS - t0)) s)"
    ;;
  plan)
    OUT="$OUT" BUDGET_S=$(left) launch/gpu/run_memory_gpu.sh plan > "$OUT/plan.log" 2>&1
    note "planner vs GPU rc=$? ($((SECONDS - t0)) s)"
    grep -E "^plan " "$OUT/memory_summary.txt" 2>/dev/null | tee -a "$summary"
    ;;
  *) echo "run_check: unknown stage $stage" >&2; exit 2 ;;
  esac
done
[ -d "$BP" ] && { cp "$BP/table.md" "$OUT/" 2>/dev/null; tar -czf "$OUT/bench.tgz" -C "$BP" --exclude='*.bin' . ; cat "$BP/table.md" 2>/dev/null; }
cat "$summary"
