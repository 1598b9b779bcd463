// Reductions and broadcasting views.
//   sum(x, dims, keepdim)  x (...) → (...) with `dims` removed (or kept as 1) (the mean: ops/mean.h)
//   expand(x, shape)       x broadcast to `shape` (NumPy rules); backward sums back
//   argmax(x)              x (..., V) → (...) i64: the first index of the largest value along the
//                          last dim, NaN skipped (0 for a row of NaN); no gradient. Greedy decoding
//                          takes its token on the device with it, so only B ids cross to the host.
// CPU sums accumulate in double. Backward writes fresh tensors (=).
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace st::ops {

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor sum(const Tensor& x);  // all elements → shape ()
// g (shaped like a broadcast result) summed down to `shape` (the backward of broadcasting)
Tensor sum_to_shape(const Tensor& g, const Shape& shape);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor argmax(const Tensor& x);

namespace cpu {
// out has x's shape with reduced dims set to 1 (keepdim); out is f32, x any float dtype.
void sum_fwd(const Tensor& x, Tensor& out);
// x (R, V) contiguous → out (R) i64 contiguous
void argmax_fwd(const Tensor& x, Tensor& out);
}  // namespace cpu
namespace cuda {
void sum_fwd(const Tensor& x, Tensor& out);
void argmax_fwd(const Tensor& x, Tensor& out);
}  // namespace cuda

}  // namespace st::ops
