#include "ops/cuda_stub/no_cuda.h"
#include "ops/step_state.h"

namespace st::ops::cuda {
void step_state_begin(double*, float*) { no_cuda("step_state_begin"); }
void step_state_add_loss(double*, const float*) { no_cuda("step_state_add_loss"); }
void grad_stats_to_state(const std::vector<Tensor>&, const std::vector<double>&, double*) {
  no_cuda("grad_stats_to_state");
}
void step_state_decide(double*, const double*, const float*) { no_cuda("step_state_decide"); }
void adamw_step_multi_state(const std::vector<AdamWSlot>&, const std::vector<bool>&, const double*) {
  no_cuda("adamw_step_multi_state");
}
}  // namespace st::ops::cuda
