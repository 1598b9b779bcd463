// Strided element offsets for up to 8 dims and two operands (stride 0 = broadcast). Dims of size
// 1 are dropped and dims that are contiguous in both operands are merged first, so most views
// reduce to one or two dims. Used by copies, fills, adds and the elementwise kernels.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace st::cuda {

constexpr int kMaxDims = 8;

struct Strided2 {
  int nd = 0;
  int64_t shape[kMaxDims];
  int64_t s0[kMaxDims];  // operand 0 (usually the destination)
  int64_t s1[kMaxDims];  // operand 1

  __device__ inline void offsets(int64_t i, int64_t& o0, int64_t& o1) const {
    o0 = 0;
    o1 = 0;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t idx = i % shape[d];
      i /= shape[d];
      o0 += idx * s0[d];
      o1 += idx * s1[d];
    }
  }
};

// Throws ShapeError naming `op` when more than 8 dims remain after merging.
Strided2 make_strided2(const Shape& shape, const Shape& s0, const Shape& s1, const char* op);

}  // namespace st::cuda
