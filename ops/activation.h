// Pointwise activations.
//   gelu(x) x (...) → (...): tanh form 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as GPT-2 and
//     PyTorch's gelu(approximate="tanh")
//   relu(x) x (...) → (...): max(x, 0); the gradient at exactly 0 is 0 (PyTorch's choice)
//   silu(x) x (...) → (...): x·sigmoid(x), computed as x / (1 + exp(−x)) and its gradient as
//     dy·σ·(1 + x·(1 − σ)), σ = 1/(1 + exp(−x)), in PyTorch's order (Llama's act_fn; the fused
//     gate form is ops::swiglu, ops/swiglu.h, which shares these formulas bit for bit)
// All three save only their input; backward recomputes the derivative from it and writes a fresh
// tensor (=). CPU computes in f32 (f16/bf16 widened, rounded once on store).
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor gelu(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);

// Backend kernels: every tensor contiguous, on the backend's device, all of x's dtype.
namespace cpu {
void gelu_fwd(const Tensor& x, Tensor& y);                        // x (n) → y (n)
void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);     // x, dy (n) → dx (n) =
void relu_fwd(const Tensor& x, Tensor& y);                        // x (n) → y (n)
void relu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);     // x, dy (n) → dx (n) =
void silu_fwd(const Tensor& x, Tensor& y);                        // x (n) → y (n)
void silu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);     // x, dy (n) → dx (n) =
}  // namespace cpu
namespace cuda {
void gelu_fwd(const Tensor& x, Tensor& y);
void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);
// x, dy, dx (M, N) contiguous: dx = dy · gelu'(x) and col_sum (N) = Σ_rows dx in one pass (the
// MLP backward's dpre and db1; col_sum equals sum(dx, {0}) bit for bit). ops/cuda/reduce.cu.
void gelu_bwd_sum_cols(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& col_sum);
void relu_fwd(const Tensor& x, Tensor& y);
void relu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);
void silu_fwd(const Tensor& x, Tensor& y);
void silu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);
}  // namespace cuda

}  // namespace st::ops
