// Reductions and broadcasting views.
//   sum(x, dims, keepdim)  x (...) → (...) with `dims` removed (or kept as 1)
//   mean(x, dims, keepdim) likewise, divided by the number of reduced elements
//   expand(x, shape)       x broadcast to `shape` (NumPy rules); backward sums back
// CPU sums accumulate in double. Backward writes fresh tensors (=).
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace st::ops {

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor sum(const Tensor& x);  // all elements → shape ()
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor expand(const Tensor& x, const Shape& shape);

namespace cpu {
// out has x's shape with reduced dims set to 1 (keepdim); out is f32, x any float dtype.
void sum_fwd(const Tensor& x, Tensor& out);
}  // namespace cpu
namespace cuda {
void sum_fwd(const Tensor& x, Tensor& out);
}  // namespace cuda

}  // namespace st::ops
