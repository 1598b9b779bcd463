// The mean: a sum (ops/reduce.h) scaled by one over the number of reduced elements
// (ops/elementwise.h), with the gradient of both. Apart from reduce.h because it needs the
// elementwise scale, and elementwise's broadcasting backward needs reduce's sum_to_shape.
//   mean(x, dims, keepdim)  x (...) → (...) with `dims` removed (or kept as 1)
//   mean(x)                 all elements → shape ()
// An empty reduction gives NaN (0 · ∞), as NumPy's and torch's mean do.
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace st::ops {

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x);

}  // namespace st::ops
