// Softmax and log-softmax over the last dim: x (..., C) → (..., C), numerically stable
// (the row maximum is subtracted first).
// Both save their output y; backward writes a fresh tensor (=):
//   softmax:      dx = y ∘ (dy − Σ_c dy·y)
//   log_softmax:  dx = dy − exp(y) ∘ Σ_c dy
// CPU computes in f32 (f16/bf16 widened, rounded once on store).
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);

// Backend kernels on contiguous tensors of one dtype viewed as (rows, C); `log` picks log-softmax.
namespace cpu {
void softmax_fwd(const Tensor& x, Tensor& y, bool log);                       // x (R, C) → y (R, C)
void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx, bool log);    // y, dy (R, C) → dx (R, C) =
}  // namespace cpu
namespace cuda {
void softmax_fwd(const Tensor& x, Tensor& y, bool log);
void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx, bool log);
}  // namespace cuda

}  // namespace st::ops
