// Gradient norm and clipping by the global norm (torch.nn.utils.clip_grad_norm_):
//   norm = √(Σ over every gradient element of g²)   (the squares summed in double; with model
//          parallelism the caller all-reduces local_sum_squares() before taking the root)
//   coef = clip / (norm + 1e−6); when clip > 0 and coef < 1 every gradient is scaled by coef.
// The reported norm is the one before clipping.
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

double local_sum_squares(const std::vector<Tensor>& grads);
bool any_inf_nan(const std::vector<Tensor>& grads);
// Scales grads in place when needed; returns the factor applied (1 when none).
double clip_by_global_norm(std::vector<Tensor>& grads, double norm, double clip);

}  // namespace st::runtime
