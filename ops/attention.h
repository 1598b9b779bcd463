// Causal scaled-dot-product attention as one op (so that CUDA can fuse it, flash-style):
//   q, k, v (B, H, T, D) → out (B, H, T, D),
//   out = softmax(q·kᵀ/√D + causal mask) · v,  mask: query t sees keys s ≤ t.
// Forward saves lse (B, H, T) f32, the log-sum-exp of each masked score row; the CPU backward
// recomputes the probabilities P = exp(S − lse) from q, k (no T×T buffer is kept between passes):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ = dS·K/√D,  dK = dSᵀ·Q/√D.
// (rowsum(P ∘ dP) = rowsum(dO ∘ O), which is what a fused kernel uses; `out` is passed for that.)
// Backward writes fresh tensors (=). CPU: ops/cpu/sgemm products per (b, h) in f32.
#pragma once
#include "ops/rope.h"
#include "tensor/tensor.h"

namespace st::ops {

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v);

// The same on the packed projection a transformer block computes:
//   qkv (B, T, 3·H·D) = [q | k | v], each (B, T, H, D) → out (B, T, H·D), heads joined.
// On CUDA (any float dtype, D ≤ 128) every backend reads q, k, v in place and the backward writes
// dqkv (B, T, 3·H·D) as one tensor, so no head transposes are made; on the CPU it is the
// composition split heads → causal_attention → join heads (the GPT's path: its activation bytes
// are what runtime/plan/memory_plan.cpp counts).
Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads);

// Grouped-query attention on the packed projection, with rotary position embedding (Llama):
//   qkv (B, T, (H + 2·Hkv)·D) = [q heads (H·D) | k heads (Hkv·D) | v heads (Hkv·D)] → out (B, T, H·D)
// Hkv divides H (Hkv = H: multi-head, Hkv = 1: multi-query); query head h reads key/value head
// h / (H / Hkv). With `rope` (its head_dim = D), q and k of row t are rotated by the angles of
// position position_offset + t (ops/rope.h: HF's rotate-half form, in qkv's dtype) as the kernels
// read them; qkv itself is not changed and no roped copy is kept (cuDNN reads a transient one:
// ops/cuda/attention.cu). position_offset + T ≤ rope->positions(); the table must outlive the
// backward (the autograd node keeps the pointer: the model owns the table).
// Backward writes d(qkv) (B, T, (H + 2·Hkv)·D) as one fresh tensor (=): dq per query head, dk and
// dv of a key/value head summed over the H/Hkv query heads that read it, the rotation undone
// (dq = Rᵀ·dq', dk = Rᵀ·dk'). CPU: ops/cpu/attention_qkv.cpp (the head kernels of the 4-d op, so
// with Hkv = H and no rope it gives the bits of causal_attention_qkv(qkv, H)); CUDA: the backends
// and fallbacks of the packed op above, D ≤ 128.
Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const RopeTable* rope = nullptr,
                            int64_t position_offset = 0);

// Backend kernels: q, k, v, out, dout, dq, dk, dv (B, H, T, D) contiguous, one dtype;
// lse (B, H, T) f32.
namespace cpu {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse);
void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
// packed grouped-query: qkv, dqkv (B, T, (H + 2·Hkv)·D), out, dout (B, T, H·D) contiguous CPU, one
// dtype; lse (B·H, T) f32; rope may be null
void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads, int64_t kv_heads,
                       const RopeTable* rope, int64_t position_offset);
void attention_qkv_bwd(const Tensor& qkv, const Tensor& lse, const Tensor& dout, Tensor& dqkv, int64_t heads,
                       int64_t kv_heads, const RopeTable* rope, int64_t position_offset);
}  // namespace cpu
namespace cuda {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse);
void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
// packed: qkv, dqkv (B, T, (H + 2·Hkv)·D), out, dout (B, T, H·D) contiguous; lse (B·H, T) f32;
// rope may be null (its tables are read on the device: RopeTable::cos(Device::cuda))
bool attention_qkv_supported(const Tensor& qkv, int64_t heads, int64_t kv_heads);
void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads, int64_t kv_heads,
                       const RopeTable* rope, int64_t position_offset);
void attention_qkv_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv,
                       int64_t heads, int64_t kv_heads, const RopeTable* rope, int64_t position_offset);
}  // namespace cuda

}  // namespace st::ops
