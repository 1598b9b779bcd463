// Root-mean-square normalisation over the last dim C (Llama's, Hugging Face's LlamaRMSNorm):
//   x (..., C), w (C) → y (..., C) = w · round(x · rstd),  rstd = 1/√(mean_C(x²) + eps)
// x and w share one dtype T; round() rounds to T (nothing in f32). Per row, in f32 for every T:
//   var  = mean of the f32 squares x·x                      (HF: x.float().pow(2).mean(-1))
//   rstd = 1/√(var + eps), var + eps rounded to f32 first   (HF: torch.rsqrt(variance + eps))
//   n    = x·rstd in f32, rounded to T                      (HF: (x·rstd).to(input_dtype))
//   y    = w·n in f32, rounded to T                         (HF: self.weight * n, both in T)
// which is HF's order of operations and roundings: the normalised row is rounded to the input's
// dtype BEFORE the weight multiplies it (two roundings in f16/bf16; in f32 both are exact no-ops
// and y = w·(x·rstd), HF's f32 arithmetic). What differs from PyTorch is only the order of the
// sum in the mean: the CPU adds the f32 squares in double and rounds the mean once, CUDA adds
// them in f32 (a lane's elements in order, then a warp tree); rstd is 1/√ with both operations
// correctly rounded on the CPU (what PyTorch's CPU rsqrt computes) and rsqrtf on CUDA (what
// PyTorch's CUDA rsqrt calls). HF keeps a weight of another dtype than x (then y takes the
// promoted dtype); here w must be in x's dtype (the runtime casts weights to the compute dtype).
// eps defaults to LlamaRMSNorm's 1e-6 (Llama checkpoints state theirs as rms_norm_eps).
//
// Forward saves x and rstd (N) f32 (N = rows). Backward writes fresh tensors (=), in f32 from
// the saved x and rstd, each result rounded once to T:  n̂ = x·rstd (f32), g = dy·w,
//   dx = rstd·(g − n̂·mean_C(g·n̂)),   dw = Σ_rows dy·round(n̂)
// (dw uses the rounded n the forward multiplied w by, as autograd of HF's forward does; HF's
// autograd also rounds g to T before the f32 part, which this backward does not.) The CPU sums
// mean_C(g·n̂) and dw's column sums in double; CUDA in f32 in a fixed order (no atomics), so
// both are bit-reproducible run to run.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor rmsnorm(const Tensor& x, const Tensor& w, float eps = 1e-6f);

// Backend kernels: x, y, dy, dx (N, C) contiguous, w, dw (C), all of x's dtype; rstd (N) f32.
//   fwd: y, rstd written (=)
//   bwd: dx, dw written (=)
namespace cpu {
void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw);
}  // namespace cpu
namespace cuda {
void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw);
}  // namespace cuda

}  // namespace st::ops
