// Gradient norm and clipping by the global norm (torch.nn.utils.clip_grad_norm_):
//   norm = √(Σ over every gradient element of g²)   (the squares summed in double; with model
//          parallelism the caller all-reduces local_sum_squares() before taking the root)
//   coef = clip / (norm + 1e−6); when clip > 0 and coef < 1 every gradient is scaled by coef.
// The reported norm is the one before clipping. The trainer takes the sum and the inf/NaN flag
// from one ops::grad_stats pass and hands clip_coefficient() to the optimizer (applied as the
// update kernel loads the gradient); the vector forms below serve tests and simple loops.
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

double local_sum_squares(const std::vector<Tensor>& grads);
bool any_inf_nan(const std::vector<Tensor>& grads);
// The factor clipping applies for this norm: clip / (norm + 1e−6) when clip > 0 and that is
// < 1, else 1 (also for a NaN norm).
double clip_coefficient(double norm, double clip);
// Scales grads in place when needed; returns the factor applied (1 when none).
double clip_by_global_norm(std::vector<Tensor>& grads, double norm, double clip);

}  // namespace st::runtime
