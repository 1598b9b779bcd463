// SwiGLU, the gated activation of Llama's MLP, on the output of ONE GEMM whose weight holds the
// gate and up projections side by side:
//   gu (..., 2F) = [gate | up] → y (..., F) = silu(gate)·up,   silu(g) = g·sigmoid(g)
// gate = gu[..., 0:F], up = gu[..., F:2F]. With Hugging Face's LlamaMLP weights (gate_proj,
// up_proj: (F, C) each, (out, in)) the packed weight is cat([gate_proj, up_proj], dim 0) (2F, C),
// or its transpose (C, 2F) as ops::linear stores it (in, out). A tensor-parallel column split
// must keep each rank's piece packed the same way: [gate_k | up_k] (the k-th F/tp slice of each
// half), not a contiguous slice of the packed weight.
// Rounding, in HF's order for every dtype T (LlamaMLP computes act_fn(gate)·up in T):
//   s = silu(g) = g / (1 + exp(−g)) in f32 (PyTorch's formula), rounded to T
//   y = s·u in f32, rounded to T
// so in f16/bf16 silu's output is rounded before the product (two roundings); in f32 both are
// the f32 operations PyTorch runs. Bit-identical, forward and backward, to the unfused
// ops::mul(ops::silu(gate), up) (gate, up the two narrow views of gu) in every dtype.
// Saves gu only. Backward in one pass writes a fresh d(gu) (..., 2F) (=), with the unfused ops'
// roundings (autograd of HF's forward has the same):
//   d(up)   = dy·s, rounded to T
//   d(gate) = silu'(g, round(dy·u)),  silu'(g, d) = d·σ·(1 + g·(1 − σ)), σ = 1/(1 + exp(−g)),
//             evaluated left to right in f32 (PyTorch's silu_backward), rounded to T
// The CPU's exp is ops/cpu_math/elementary.h's exp_f32 (same bits on every CPU), CUDA's expf.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor swiglu(const Tensor& gu);

// Backend kernels: gu, dgu (M, 2F), y, dy (M, F), contiguous, one dtype.
//   fwd: y written (=);  bwd: dgu written (=)
namespace cpu {
void swiglu_fwd(const Tensor& gu, Tensor& y);
void swiglu_bwd(const Tensor& gu, const Tensor& dy, Tensor& dgu);
}  // namespace cpu
namespace cuda {
void swiglu_fwd(const Tensor& gu, Tensor& y);
void swiglu_bwd(const Tensor& gu, const Tensor& dy, Tensor& dgu);
}  // namespace cuda

}  // namespace st::ops
