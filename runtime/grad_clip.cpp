#include "runtime/grad_clip.h"

#include "ops/optim.h"

namespace st::runtime {

double local_sum_squares(const std::vector<Tensor>& grads) {
  double s = 0;
  for (auto& g : grads) s += ops::sum_squares(g);
  return s;
}

bool any_inf_nan(const std::vector<Tensor>& grads) {
  for (auto& g : grads)
    if (ops::has_inf_nan(g)) return true;
  return false;
}

double clip_by_global_norm(std::vector<Tensor>& grads, double norm, double clip) {
  if (clip <= 0) return 1.0;
  const double coef = clip / (norm + 1e-6);
  if (!(coef < 1.0)) return 1.0;
  for (auto& g : grads) ops::scale_(g, coef);
  return coef;
}

}  // namespace st::runtime
