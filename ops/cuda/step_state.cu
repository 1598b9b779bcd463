// The device step state's kernels (ops/step_state.h): single-thread kernels over a few scalars,
// each the host's own arithmetic written with explicit _rn intrinsics (no contraction), so that
// the bits equal the eager step's (runtime/train/trainer.cpp, runtime/optim/mixed_precision.cpp,
// runtime/optim/grad_clip.cpp, ops/optim.cpp adamw_scalars).
#include "ops/cuda/common.cuh"
#include "ops/step_state.h"

namespace st::ops::cuda {
namespace {

__global__ void begin_kernel(DeviceStepState* s, float* loss_factor) {
  const double scale = s->loss_scale;
  s->loss_factor = static_cast<float>(__ddiv_rn(scale, s->divisor));  // loss_scale / (K·dp)
  *loss_factor = s->loss_factor;
  s->inv_scale = s->scaler_enabled ? static_cast<float>(__ddiv_rn(1.0, scale)) : 1.f;
  s->loss_sum = 0.0;
  s->sumsq = 0.0;
  s->fp8_overflow = 0;
  s->fp8_underflow = 0;
  s->found_inf = 0;
}

__global__ void add_loss_kernel(DeviceStepState* s, const float* loss) {
  s->loss_sum = __dadd_rn(s->loss_sum, static_cast<double>(*loss));
}

// LossScaler::update, clip_coefficient, Optimizer::step's t + 1 and adamw_scalars, in the
// trainer's order; the report is what StepMetrics shows.
__global__ void decide_kernel(DeviceStepState* s, const double* bc1, const float* bc2_sqrt) {
  const double loss = __ddiv_rn(s->loss_sum, s->divisor);
  const bool found_inf = s->found_inf != 0;
  const bool nonfinite = found_inf || !isfinite(loss);
  s->rep_loss = loss;
  s->rep_scale = s->loss_scale;
  s->rep_found_inf = found_inf ? 1 : 0;
  s->rep_skipped = nonfinite ? 1 : 0;
  s->skip = nonfinite ? 1 : 0;
  const bool enabled = s->scaler_enabled != 0;
  if (nonfinite) {
    s->rep_at_floor = enabled && __dmul_rn(s->loss_scale, 0.5) < s->min_scale ? 1 : 0;
    s->rep_norm = __longlong_as_double(0x7ff8000000000000ll);  // quiet NaN
    if (enabled) {
      s->good_steps = 0;
      const double half = __dmul_rn(s->loss_scale, 0.5);
      s->loss_scale = half < s->min_scale ? s->min_scale : half;
    }
    return;
  }
  s->rep_at_floor = 0;
  const double norm = __dsqrt_rn(s->sumsq);
  s->rep_norm = norm;
  double coef = 1.0;
  if (s->clip > 0) {
    const double c = __ddiv_rn(s->clip, __dadd_rn(norm, 1e-6));
    coef = c < 1.0 ? c : 1.0;
  }
  const double unscale = enabled ? __ddiv_rn(1.0, s->loss_scale) : 1.0;
  s->gs.unscale = static_cast<float>(unscale);
  s->gs.clip = static_cast<float>(coef);
  int64_t t = s->opt_step + 1;
  if (t >= s->table_size) t = s->table_size - 1;  // the host sizes the tables past the last step
  s->opt_step = t;
  AdamWScalars a;
  a.decay = s->decay;
  a.lerp_w = s->lerp_w;
  a.beta2 = s->beta2;
  a.one_minus_b2 = s->one_minus_b2;
  a.bc2_sqrt = bc2_sqrt[t];
  a.eps = s->eps;
  a.neg_step_size = static_cast<float>(-__ddiv_rn(s->lr, bc1[t]));
  s->with_wd = a;
  a.decay = 1.f;
  s->no_wd = a;
  if (enabled && ++s->good_steps >= s->growth_interval) {
    s->loss_scale = __dmul_rn(s->loss_scale, 2.0);
    s->good_steps = 0;
  }
}

DeviceStepState* as_state(double* p) { return reinterpret_cast<DeviceStepState*>(p); }

}  // namespace

void step_state_begin(double* state, float* loss_factor) {
  begin_kernel<<<1, 1, 0, current_stream()>>>(as_state(state), loss_factor);
  CHECK_LAUNCH();
}

void step_state_add_loss(double* state, const float* loss) {
  add_loss_kernel<<<1, 1, 0, current_stream()>>>(as_state(state), loss);
  CHECK_LAUNCH();
}

void step_state_decide(double* state, const double* bc1, const float* bc2_sqrt) {
  decide_kernel<<<1, 1, 0, current_stream()>>>(as_state(state), bc1, bc2_sqrt);
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda
