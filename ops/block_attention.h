// Attention of a query block against ONE key/value block: the op a ring (context-parallel)
// attention runs once per (query chunk, key chunk) pair while the next key/value block is in
// flight (issue 34). The blocks' results are joined by ops/attention_merge.h (online softmax) and
// scheduled by ops/ring_schedule.h; docs/design.md "Context parallelism: the block ops".
//   q (B, H, Tq, D), k, v (B, Hkv, Tk, D), Hkv dividing H: query head h reads key/value head
//   h / (H / Hkv) (grouped-query, as ops/attention.h). The mask kind says where the key block
//   sits relative to the query block:
//     causal  the diagonal block: q and k at the same positions (Tq = Tk), key j visible to
//             query i iff j ≤ i;
//     full    every key of the block precedes every query: no mask.
//   Forward: out = softmax_block(q·kᵀ/√D)·v normalised within the block, lse = the log-sum-exp
//   of each query row's visible scores (f32). Every row sees at least one key, so lse is finite.
//   Backward (the ring's): given the GLOBAL lse of each query row (the merge of every block's)
//   and Δ = rowsum(dout ∘ out_global) (attention_delta, computed once per query chunk),
//     P = exp(S − lse_global), dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − Δ), dQ += dS·K/√D, dK = dSᵀ·Q/√D,
//   which summed over all key blocks are the gradients of the whole attention.
// CPU: sgemm products per (b, h) in f32, exp/log from ops/cpu_math (ops/cpu/block_attention.cpp),
// any float dtype and shape. CUDA (ops/cuda/block_attention.cu): cuDNN's fused attention graphs
// (causal or unmasked) where the attention backend allows and cuDNN takes the block, else the own
// flash kernels' Full / Acc instantiations: f16/bf16, head dim 64, Tq = Tk; anything else a
// DeviceError.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

enum class BlockMask { causal, full };
const char* block_mask_name(BlockMask mask);

struct BlockAttention {
  Tensor out;  // (B, H, Tq, D), q's dtype, normalised within the block
  Tensor lse;  // (B, H, Tq) f32
};

// Forward of one block (no autograd: the ring composes the backward from block_attention_bwd).
BlockAttention block_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask);

// delta (B, H, Tq) f32 = rowsum(dout ∘ out) of out, dout (B, H, Tq, D): the backward's Δ, computed
// once per query chunk from the merged (global) output.
Tensor attention_delta(const Tensor& out, const Tensor& dout);

struct BlockGrads {
  Tensor dk, dv;  // (B, Hkv, Tk, D), k's dtype, written (=): summed over the group's query heads
};

// Backward of one block against the global softmax statistics:
//   q, dout (B, H, Tq, D), k, v (B, Hkv, Tk, D), lse, delta (B, H, Tq) f32 (global);
//   dq (B, H, Tq, D) f32 contiguous: ACCUMULATED (+=) — the ring adds every key block's share.
// `out`, when given: the query chunk's global output (B, H, Tq, D), the one delta was formed from.
// With it CUDA may run cuDNN's fused backward (which forms Δ from out and dout itself; its dq is
// rounded to q's dtype before it is added); without it, or where cuDNN declines, the flash kernels.
BlockGrads block_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                               const Tensor& delta, BlockMask mask, Tensor& dq, const Tensor& out = Tensor());

// Backend kernels: contiguous tensors of the shapes above; out, dk, dv allocated by the caller.
namespace cpu {
void block_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask, Tensor& out, Tensor& lse);
void attention_delta(const Tensor& out, const Tensor& dout, Tensor& delta);
void block_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, BlockMask mask, Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace cpu
namespace cuda {
// the attention backend (ops/attention_backend.h) picks: cuDNN's fused graphs where it takes the
// block (Tq = Tk; the backward only with `out`), else the flash kernels
void block_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask, Tensor& out, Tensor& lse);
void attention_delta(const Tensor& out, const Tensor& dout, Tensor& delta);
void block_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, BlockMask mask, Tensor& dq, Tensor& dk, Tensor& dv,
                         const Tensor& out = Tensor());
}  // namespace cuda

}  // namespace st::ops
