#include "runtime/optim/grad_clip.h"

#include "ops/optim.h"

namespace st::runtime {

double local_sum_squares(const std::vector<Tensor>& grads) { return ops::grad_stats(grads, {}).sumsq; }

bool any_inf_nan(const std::vector<Tensor>& grads) { return ops::grad_stats(grads, {}).found_inf; }

double clip_coefficient(double norm, double clip) {
  if (clip <= 0) return 1.0;
  const double coef = clip / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

double clip_by_global_norm(std::vector<Tensor>& grads, double norm, double clip) {
  const double coef = clip_coefficient(norm, clip);
  if (coef != 1.0)
    for (auto& g : grads) ops::scale_(g, coef);
  return coef;
}

}  // namespace st::runtime
