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
// adamw_step_multi is the same update over a list of tensors at once (few launches, like torch's
// foreach path, but with the single-tensor rounding). Each slot carries its own scalars (weight
// decay differs per tensor). The CPU loops over adamw_step's kernel; CUDA runs a chunk table of
// up to 64 tensors per launch (GPT-2's 148 tensors: 3 launches instead of 148) whose per-element
// math is adamw_step's own device function: results equal the per-tensor op bit for bit.
//
// sgd_step is torch.optim.SGD (dampening 0, no Nesterov): g ← g + wd·p; buf ← g on the first
// step, else μ·buf + g; p ← p − lr·buf (with μ = 0 buf is unused and may be undefined).
//
// Both take the raw gradient (any float dtype, e.g. the f16/bf16 .grad() of mixed precision)
// and a GradScale applied as the kernel loads it, with the rounding of the separate passes it
// replaces: g ← float(g)·float(unscale), then g ← g·float(clip), each product rounded to f32
// (a factor of 1 changes nothing: x·1 is exact). So no unscaled or clipped copy is needed.
//
// grad_stats is the statistics pass of a training step over all gradients at once:
//   sumsq = Σ_i w_i · Σ_j (float(g_ij)·float(inv_scale))²   (squares and sums in double)
//   found_inf = any element of any tensor (whatever its weight) is ±inf/NaN after that product
// w_i = 0 leaves tensor i out of the sum (a copy another rank counts). CPU: per-tensor sums in
// element order, added in tensor order (equal to Σ_i w_i·sum_squares(g_i) bit for bit). CUDA:
// one fixed-order reduction over a chunk table of all tensors (deterministic, no float atomics),
// a few launches, one device→host read: the only host synchronisation of the call.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace st::ops {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
};

// Factors applied to a gradient as it is loaded, in this order (each rounded to f32 once).
struct GradScale {
  double unscale = 1.0;  // 1 / loss scale (fp16), else 1
  double clip = 1.0;     // the global-norm clip coefficient when clipping applies, else 1
};

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p, int64_t step,
                Tensor param_lp = Tensor(), const GradScale& gs = {});
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, const GradScale& gs = {});

struct GradStats {
  double sumsq = 0;        // weighted Σ of the unscaled squares
  bool found_inf = false;  // any ±inf/NaN
};
// grads: defined float tensors of one device (any shapes, dtypes mixed allowed, views fine);
// weights: one per grad, or empty for all 1. Empty grads → {0, false}.
GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, double inv_scale = 1.0);
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

// One tensor of adamw_step_multi: adamw_step's arguments, the scalars already made by
// adamw_scalars (so the step and weight decay are the caller's, per tensor). The pointers are
// not owned and must outlive the call. param, m, v (n) f32 contiguous; grad (n) any float dtype,
// views fine (a non-contiguous one is copied first); param_lp (n) f16/bf16 contiguous or
// undefined. All slots on one device; n may differ from slot to slot (and be 0).
//
// snapshot: undefined, or where the step also writes what it leaves in param, m and v — a
// contiguous f32 tensor of ≥ adamw_snapshot_floats(n) elements on the slot's device, laid out
// [param | m | v], each adamw_snapshot_stride(n) floats after the previous (16-byte aligned when
// the tensor is). An asynchronous save downloads the copies while the next step overwrites the
// state (runtime/optim/optimizer.h): written inside the update, they cost its stores alone, where
// a copy afterwards reads the state once more.
struct AdamWSlot {
  Tensor* param;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
  Tensor param_lp;
  AdamWScalars s;
  Tensor snapshot;
};
constexpr int64_t adamw_snapshot_stride(int64_t n) { return (n + 3) / 4 * 4; }
constexpr int64_t adamw_snapshot_floats(int64_t n) { return 3 * adamw_snapshot_stride(n); }
// Throws naming `op` and slot k when sl.snapshot is defined but not as above.
void check_adamw_snapshot(const char* op, size_t k, const AdamWSlot& sl);
// Errors name the slot's index ("adamw_step_multi: slot 3: ..."). Nothing is updated when a
// check fails (all slots are checked first). An empty list does nothing.
void adamw_step_multi(const std::vector<AdamWSlot>& slots, const GradScale& gs = {});

// Backend kernels: tensors contiguous on the backend's device, shapes equal (n elements).
// gs: the GradScale factors already rounded to f32 (unscale, clip).
struct GradScaleF32 {
  float unscale = 1.f, clip = 1.f;
};
namespace cpu {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp,
                GradScaleF32 gs = {});
void adamw_step_multi(const std::vector<AdamWSlot>& slots, GradScaleF32 gs = {});  // grads contiguous
void adamw_snapshot(const AdamWSlot& sl);  // param, m, v → sl.snapshot (AdamWSlot's layout)
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, GradScaleF32 gs = {});
// grads contiguous (any float dtype); weights aligned with grads
GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, float inv_scale);
double sum_squares(const Tensor& x);
bool has_inf_nan(const Tensor& x);
void scale_(Tensor& x, double s);
}  // namespace cpu
namespace cuda {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp,
                GradScaleF32 gs = {});
// ops/cuda/optim.cu; grads contiguous; ⌈slots / 64⌉ launches or a few more (see the .cu), no sync
void adamw_step_multi(const std::vector<AdamWSlot>& slots, GradScaleF32 gs = {});
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, GradScaleF32 gs = {});
// ops/cuda/grad_stats.cu; synchronises the current stream once (the result is read back)
GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, float inv_scale);
double sum_squares(const Tensor& x);  // synchronises the current stream
bool has_inf_nan(const Tensor& x);    // synchronises the current stream
void scale_(Tensor& x, double s);
}  // namespace cuda

}  // namespace st::ops
