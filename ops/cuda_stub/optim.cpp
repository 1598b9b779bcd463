#include "ops/cuda_stub/no_cuda.h"
#include "ops/optim.h"

namespace st::ops::cuda {
void adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWScalars&, Tensor&, GradScaleF32) {
  no_cuda("adamw_step");
}
void adamw_step_multi(const std::vector<AdamWSlot>&, GradScaleF32) { no_cuda("adamw_step_multi"); }
void sgd_step(Tensor&, const Tensor&, Tensor&, float, float, float, bool, GradScaleF32) { no_cuda("sgd_step"); }
GradStats grad_stats(const std::vector<Tensor>&, const std::vector<double>&, float) { no_cuda("grad_stats"); }
double sum_squares(const Tensor&) { no_cuda("sum_squares"); }
bool has_inf_nan(const Tensor&) { no_cuda("has_inf_nan"); }
void scale_(Tensor&, double) { no_cuda("scale_"); }
}  // namespace st::ops::cuda
