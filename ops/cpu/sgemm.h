// The one f32 matrix product of the CPU kernels (matmul, attention). Its floating-point order is
// fixed by this file, not by the machine: Eigen's own products pick their blocking (kc, mc, nc)
// from the cache sizes the CPU reports at run time, and kc decides how each dot product is split
// into partial sums while mc and nc decide which register kernel (with which accumulators) a row
// or column lands in, so the same product gave different bits on different CPUs. sgemm runs
// Eigen's packed GEBP kernel with constant block sizes instead (ops/cpu/sgemm.cpp), on the
// calling thread, so the bits depend only on the shapes, the inputs and the compiled instruction
// set (pinned by the top-level CMakeLists.txt; docs/testing.md "CPU numerics").
#pragma once
#include <cstdint>

namespace st::ops::cpu {

// c (M, N) row-major, overwritten with op(a)·op(b) (accumulate: c += op(a)·op(b)):
//   a: (M, K) row-major, or (K, M) row-major read transposed when ta;
//   b: (K, N) row-major, or (N, K) row-major read transposed when tb.
// Every dot product is summed in depth blocks of kc (below), each block's partial sum added to c
// in ascending order; so c = 0 then += over K = K1 + K2 equals two calls over K1 and K2 (the second
// accumulating) bit for bit when K1 is a multiple of kc (ops/lm_head_loss.h relies on it).
void sgemm(const float* a, bool ta, const float* b, bool tb, float* c, int64_t M, int64_t N, int64_t K,
           bool accumulate = false);

// For tests: the depth of one packed panel (default 256), i.e. the blocks in which every dot
// product is summed; returns the previous value. A smaller block reorders every sum over K —
// what a tensor-parallel row split does to its products — so the layout test measures, with it,
// the roundoff noise a run shows under another summation order (tests/runtime/train/test_layouts).
// Not for production: the bits of every CPU product depend on it.
int64_t sgemm_set_depth_block(int64_t kc);

}  // namespace st::ops::cpu
