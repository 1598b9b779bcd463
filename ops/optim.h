// Optimizer update kernels and the gradient utilities around them. All in place, none
// differentiable (they run outside autograd, on parameters and their gradients).
//
// adamw_step is torch.optim.AdamW's single-tensor path (foreach=False), operation by operation,
// so that f32 results match PyTorch to the ulp where the hardware allows:
//   p ← p·(1 − lr·wd)                         (skipped when wd = 0; the caller passes wd = 0 for
//                                              tensors that take no decay, e.g. biases, norms)
//   m ← lerp(m, g, 1 − β1)                    (m + w·(g − m) as one fused multiply-add)
//   v ← v·β2 + ((1 − β2)·g)·g
//   p ← p + ((−lr/(1 − β1^t))·m) / (√v / √(1 − β2^t) + eps)
// The scalars are computed on the host in double, the way PyTorch's Python code does, and each
// is rounded to f32 once (AdamWScalars). Hyper-parameters arrive as float; they are widened to
// the double of their shortest decimal form (1e-3f → 0.001), i.e. the value a Python config
// holding the same literal has. param, m, v f32 contiguous; grad any float dtype; param_lp
// (optional) f16/bf16 receives the updated param rounded once, in the same pass.
//
// sgd_step is torch.optim.SGD (dampening 0, no Nesterov): g ← g + wd·p; buf ← g on the first
// step, else μ·buf + g; p ← p − lr·buf (with μ = 0 buf is unused and may be undefined).
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace st::ops {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
};

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p, int64_t step,
                Tensor param_lp = Tensor());
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step);
double sum_squares(const Tensor& x);  // Σ x² accumulated in double, any float dtype
bool has_inf_nan(const Tensor& x);    // any element ±inf or NaN, any float dtype
void scale_(Tensor& x, double s);     // x ← x·s in place (f32 multiply by float(s), rounded once)

// The f32 scalars of one AdamW step (step t ≥ 1), identical for every backend.
struct AdamWScalars {
  float decay;          // 1 − lr·wd (1 when wd = 0)
  float lerp_w;         // 1 − β1
  float beta2;          // β2
  float one_minus_b2;   // 1 − β2
  float bc2_sqrt;       // √(1 − β2^t)
  float eps;            // eps
  float neg_step_size;  // −lr / (1 − β1^t)
};
AdamWScalars adamw_scalars(const AdamWParams& p, int64_t step);
// The double a Python literal with f's shortest decimal form has (0.9f → 0.9).
double decimal_widen(float f);

// Backend kernels: tensors contiguous on the backend's device, shapes equal (n elements).
namespace cpu {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step);
double sum_squares(const Tensor& x);
bool has_inf_nan(const Tensor& x);
void scale_(Tensor& x, double s);
}  // namespace cpu
namespace cuda {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step);
double sum_squares(const Tensor& x);  // synchronises the current stream
bool has_inf_nan(const Tensor& x);    // synchronises the current stream
void scale_(Tensor& x, double s);
}  // namespace cuda

}  // namespace st::ops
