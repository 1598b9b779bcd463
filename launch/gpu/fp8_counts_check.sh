#!/usr/bin/env bash
# The FP8 overflow / underflow counts on the GPU (issue 32), in one device call: build, the CUDA
# counts against the CPU's on every cast kernel (tests/gpu/test_gpu_fp8), the graph step's counts
# against the eager step's (tests/gpu/test_gpu_cuda_graph, Fp8*), and the cast kernels' bandwidth
# with and without the counts' block sums (bench_ops_cuda's fp8 section: the "counting" rows).
# What to look for: both tests pass; in bench.log the "counting" rows within a few % of the rows
# above them, and the cast rows within a few % of main's (BASE=<a build of main> runs its bench
# in the same call: the per-element tests run in every row of this branch).
#   usage: OUT=dir [BUILD=build] [BASE=build-main] launch/gpu/fp8_counts_check.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
{ cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$BUILD" -j"${JOBS:-16}" --target test_gpu_fp8 test_gpu_cuda_graph bench_ops_cuda; } > "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
rc=0
"$BUILD/tests/gpu/test_gpu_fp8" > "$OUT/test_gpu_fp8.log" 2>&1 || rc=1
"$BUILD/tests/gpu/test_gpu_cuda_graph" --gtest_filter='*Fp8*' > "$OUT/test_gpu_cuda_graph.log" 2>&1 || rc=1
tail -3 "$OUT/test_gpu_fp8.log" "$OUT/test_gpu_cuda_graph.log"
grep -E "^fp8 step" "$OUT/test_gpu_cuda_graph.log"
"$BUILD/tests/bench/bench_ops_cuda" 16 1024 fp8 > "$OUT/bench.log" 2>&1
grep -E "copy|fp8|the same" "$OUT/bench.log"
if [ -n "${BASE:-}" ] && [ -x "$BASE/tests/bench/bench_ops_cuda" ]; then
  echo "--- main ($BASE)"
  "$BASE/tests/bench/bench_ops_cuda" 16 1024 fp8 | tee "$OUT/bench_base.log" | grep -E "copy|fp8|the same"
fi
exit $rc
