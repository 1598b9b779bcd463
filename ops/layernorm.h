// Layer normalisation over the last dim C:
//   x (..., C), w (C), b (C) → y (..., C) = (x − mean)·rstd·w + b,  rstd = 1/√(var + eps),
//   var the biased variance (as PyTorch and GPT-2). x, w, b share one dtype.
// Forward saves mean (N) and rstd (N) in f32 (N = rows); backward (llm.c's formula) writes fresh
// tensors (=):  n̂ = (x − mean)·rstd, g = dy·w
//   dx = rstd·(g − mean_C(g) − n̂·mean_C(g·n̂)),  dw = Σ_rows dy·n̂,  db = Σ_rows dy.
// CPU computes in f32; the row statistics and the dw/db column sums accumulate in double.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, float eps = 1e-5f);

// Backend kernels: x, y, dy, dx (N, C) contiguous, w, b, dw, db (C), all of x's dtype;
// mean, rstd (N) f32.
namespace cpu {
void layernorm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean, Tensor& rstd);
void layernorm_bwd(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db);
}  // namespace cpu
namespace cuda {
void layernorm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean, Tensor& rstd);
void layernorm_bwd(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db);
}  // namespace cuda

}  // namespace st::ops
