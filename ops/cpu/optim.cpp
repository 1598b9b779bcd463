// CPU optimizer kernels: one pass over contiguous f32 state. The operation order (and where a
// fused multiply-add sits) follows PyTorch's CPU kernels: lerp and add-with-alpha are
// vec::fmadd there, addcmul / addcdiv / mul are plain products. The GradScale factors are two
// f32 products on the loaded gradient (×1 when unused: exact), as the passes they replace were.
// adamw_step_multi is adamw_step slot by slot (identical by construction).
// grad_stats: per-tensor double sums in element order, then Σ w·sum in tensor order.
#include <algorithm>
#include <cmath>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/optim.h"
#include "tensor/autograd.h"

namespace st::ops::cpu {

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp,
                GradScaleF32 gs) {
  Tensor g32 = as_f32(grad);
  const int64_t n = param.numel();
  float* p = param.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const float* g = g32.data<float>();
  const bool small_w = std::fabs(s.lerp_w) < 0.5f;  // PyTorch's lerp picks its form by |w|
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i] * s.decay;
    float gi = g[i] * gs.unscale;
    gi = gi * gs.clip;
    pm[i] = small_w ? std::fma(s.lerp_w, gi - pm[i], pm[i]) : std::fma(s.lerp_w - 1.f, gi - pm[i], gi);
    pv[i] = pv[i] * s.beta2 + s.one_minus_b2 * gi * gi;
    const float denom = std::sqrt(pv[i]) / s.bc2_sqrt + s.eps;
    pi = pi + s.neg_step_size * pm[i] / denom;
    p[i] = pi;
  }
  if (param_lp.defined()) {
    NoGradGuard ng;
    param_lp.copy_(param);
  }
}

void adamw_step_multi(const std::vector<AdamWSlot>& slots, GradScaleF32 gs) {
  for (const AdamWSlot& sl : slots) {
    Tensor lp = sl.param_lp;
    adamw_step(*sl.param, *sl.grad, *sl.m, *sl.v, sl.s, lp, gs);
    if (sl.snapshot.defined()) adamw_snapshot(sl);
  }
}

void adamw_snapshot(const AdamWSlot& sl) {
  const int64_t n = sl.param->numel();
  const int64_t stride = adamw_snapshot_stride(n);
  float* dst = sl.snapshot.data<float>();
  const Tensor* parts[] = {sl.param, sl.m, sl.v};
  for (int i = 0; i < 3; ++i)
    std::copy_n(parts[i]->data<float>(), n, dst + i * stride);
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, GradScaleF32 gs) {
  Tensor g32 = as_f32(grad);
  const int64_t n = param.numel();
  float* p = param.data<float>();
  const float* g = g32.data<float>();
  float* b = momentum != 0.f ? momentum_buf.data<float>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * gs.unscale;
    gi = gi * gs.clip;
    if (weight_decay != 0.f) gi = std::fma(p[i], weight_decay, gi);
    if (b) {
      b[i] = first_step ? gi : b[i] * momentum + gi;
      gi = b[i];
    }
    p[i] = std::fma(gi, -lr, p[i]);
  }
}

GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, float inv_scale) {
  GradStats out;
  for (size_t t = 0; t < grads.size(); ++t) {
    Tensor x32 = as_f32(grads[t]);  // f16/bf16 inf and NaN widen to f32 inf and NaN
    const float* px = x32.data<float>();
    const int64_t n = x32.numel();
    double s = 0;
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      const float xi = px[i] * inv_scale;
      bad |= !std::isfinite(xi);
      s += static_cast<double>(xi) * xi;
    }
    out.found_inf |= bad;
    if (weights[t] != 0) out.sumsq += weights[t] * s;
  }
  return out;
}

double sum_squares(const Tensor& x) {
  Tensor x32 = as_f32(x);
  const float* px = x32.data<float>();
  const int64_t n = x.numel();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(px[i]) * px[i];
  return s;
}

bool has_inf_nan(const Tensor& x) {
  Tensor x32 = as_f32(x);  // f16/bf16 inf and NaN widen to f32 inf and NaN
  const float* px = x32.data<float>();
  const int64_t n = x.numel();
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(px[i]);
  return bad;
}

void scale_(Tensor& x, double s) {
  Tensor x32 = as_f32(x);  // x itself when f32
  F32Out out(x);
  const float* px = x32.data<float>();
  float* po = out.data();
  const float fs = static_cast<float>(s);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] * fs;
  out.store();
}

}  // namespace st::ops::cpu
