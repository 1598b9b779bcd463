// Causal scaled-dot-product attention as one op (so that CUDA can fuse it, flash-style):
//   q, k, v (B, H, T, D) → out (B, H, T, D),
//   out = softmax(q·kᵀ/√D + causal mask) · v,  mask: query t sees keys s ≤ t.
// Forward saves lse (B, H, T) f32, the log-sum-exp of each masked score row; the CPU backward
// recomputes the probabilities P = exp(S − lse) from q, k (no T×T buffer is kept between passes):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ = dS·K/√D,  dK = dSᵀ·Q/√D.
// (rowsum(P ∘ dP) = rowsum(dO ∘ O), which is what a fused kernel uses; `out` is passed for that.)
// Backward writes fresh tensors (=). CPU: ops/cpu/sgemm products per (b, h) in f32.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v);

// The same on the packed projection a transformer block computes:
//   qkv (B, T, 3·H·D) = [q | k | v], each (B, T, H, D) → out (B, T, H·D), heads joined.
// On CUDA (any float dtype, D ≤ 128) every backend reads q, k, v in place and the backward writes
// dqkv (B, T, 3·H·D) as one tensor, so no head transposes are made; on the CPU it is the
// composition split heads → causal_attention → join heads.
Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads);

// Backend kernels: q, k, v, out, dout, dq, dk, dv (B, H, T, D) contiguous, one dtype;
// lse (B, H, T) f32.
namespace cpu {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse);
void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace cpu
namespace cuda {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse);
void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
// packed: qkv, dqkv (B, T, 3·H·D), out, dout (B, T, H·D) contiguous; lse (B·H, T) f32
bool attention_qkv_supported(const Tensor& qkv, const Tensor& out, int64_t heads);
void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads);
void attention_qkv_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv,
                       int64_t heads);
}  // namespace cuda

}  // namespace st::ops
