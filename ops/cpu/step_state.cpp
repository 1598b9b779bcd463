// The step state's kernels on the CPU (ops/step_state.h): the host's own arithmetic, in the order
// of ops/cuda/step_state.cu (which repeats it with correctly rounded device intrinsics), so that
// a CPU run of the graph step's code gives the eager step's bits and CI can hold it to that.
#include <cmath>
#include <limits>

#include "ops/step_state.h"

namespace st::ops::cpu {
namespace {
DeviceStepState* as_state(double* p) { return reinterpret_cast<DeviceStepState*>(p); }
}  // namespace

void step_state_begin(double* state, float* loss_factor) {
  DeviceStepState* s = as_state(state);
  const double scale = s->loss_scale;
  s->loss_factor = static_cast<float>(scale / s->divisor);  // loss_scale / (K·dp)
  *loss_factor = s->loss_factor;
  s->inv_scale = s->scaler_enabled ? static_cast<float>(1.0 / scale) : 1.f;
  s->loss_sum = 0.0;
  s->sumsq = 0.0;
  s->fp8_overflow = 0;
  s->fp8_underflow = 0;
  s->found_inf = 0;
}

void step_state_add_loss(double* state, const float* loss) {
  DeviceStepState* s = as_state(state);
  s->loss_sum = s->loss_sum + static_cast<double>(*loss);
}

void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, double* state) {
  DeviceStepState* s = as_state(state);
  if (grads.empty()) return;  // as the CUDA pass: nothing written, sumsq 0, no inf
  std::vector<Tensor> cs;
  cs.reserve(grads.size());
  for (const Tensor& g : grads) cs.push_back(g.is_contiguous() ? g : g.contiguous());
  const GradStats st = grad_stats(cs, weights, s->inv_scale);
  s->sumsq = st.sumsq;
  s->found_inf = st.found_inf ? 1 : 0;
}

// LossScaler::update, clip_coefficient, Optimizer::step's t + 1 and adamw_scalars, in the
// trainer's order (the CUDA decide_kernel line by line)
void step_state_decide(double* state, const double* bc1, const float* bc2_sqrt) {
  DeviceStepState* s = as_state(state);
  const double loss = s->loss_sum / s->divisor;
  const bool found_inf = s->found_inf != 0;
  const bool nonfinite = found_inf || !std::isfinite(loss);
  s->rep_loss = loss;
  s->rep_scale = s->loss_scale;
  s->rep_found_inf = found_inf ? 1 : 0;
  s->rep_skipped = nonfinite ? 1 : 0;
  s->skip = nonfinite ? 1 : 0;
  const bool enabled = s->scaler_enabled != 0;
  if (nonfinite) {
    s->rep_at_floor = enabled && s->loss_scale * 0.5 < s->min_scale ? 1 : 0;
    s->rep_norm = std::numeric_limits<double>::quiet_NaN();
    if (enabled) {
      s->good_steps = 0;
      const double half = s->loss_scale * 0.5;
      s->loss_scale = half < s->min_scale ? s->min_scale : half;
    }
    return;
  }
  s->rep_at_floor = 0;
  const double norm = std::sqrt(s->sumsq);
  s->rep_norm = norm;
  double coef = 1.0;
  if (s->clip > 0) {
    const double c = s->clip / (norm + 1e-6);
    coef = c < 1.0 ? c : 1.0;
  }
  const double unscale = enabled ? 1.0 / s->loss_scale : 1.0;
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
  a.neg_step_size = static_cast<float>(-(s->lr / bc1[t]));
  s->with_wd = a;
  a.decay = 1.f;
  s->no_wd = a;
  if (enabled && ++s->good_steps >= s->growth_interval) {
    s->loss_scale = s->loss_scale * 2.0;
    s->good_steps = 0;
  }
}

void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const double* state) {
  const DeviceStepState* s = reinterpret_cast<const DeviceStepState*>(state);
  std::vector<AdamWSlot> with = slots;
  for (size_t k = 0; k < with.size(); ++k) {
    with[k].s = decays[k] ? s->with_wd : s->no_wd;
    if (!s->snapshot) with[k].snapshot = Tensor();
  }
  if (!s->skip) return adamw_step_multi(with, s->gs);
  for (const AdamWSlot& sl : with)
    if (sl.snapshot.defined()) adamw_snapshot(sl);  // the state as it was
}

}  // namespace st::ops::cpu
