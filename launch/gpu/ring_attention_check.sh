#!/usr/bin/env bash
# Ring attention's block ops on the GPU (issue 34, the ops only: no --cp axis yet), in one device
# call: build, then tests/gpu/test_gpu_ring_attention (the flash kernels' Full / Acc instantiations,
# merge and Δ against the CPU ops; a cp = 2 ring against the CPU's whole attention) and the
# existing flash tests (test_gpu_attention, test_gpu_attention_gqa: the causal instantiations the
# change touched must still pass).
# What to look for: all three pass. A failure of BlockMatchesCpu names dtype, chunk length and mask.
#   usage: OUT=dir [BUILD=build] launch/gpu/ring_attention_check.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
{ cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$BUILD" -j"${JOBS:-16}" --target test_gpu_ring_attention test_gpu_attention test_gpu_attention_gqa; } \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
rc=0
for t in test_gpu_ring_attention test_gpu_attention test_gpu_attention_gqa; do
  "$BUILD/tests/gpu/$t" > "$OUT/$t.log" 2>&1 || rc=1
  grep -E "FAILED|Failure|Expected|Which is|rel_err|PASSED|SKIPPED" "$OUT/$t.log" | head -40
done
exit $rc
