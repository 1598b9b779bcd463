// Flash attention (causal) on tensor cores for f16/bf16 with head dim 64 (ops/cuda/flash_attention.cu),
// used by ops/cuda/attention.cu whenever it applies; other dtypes and head dims take the CUDA-core
// kernels there. Operands are strided views (ops/cuda/attn_operand.h), so the kernels read q, k, v
// straight out of the packed (B, T, (H + 2·Hkv)·64) tensor a fused qkv projection writes and write
// the output (and dq, dk, dv) straight into (B, T, H·64) / (B, T, (H + 2·Hkv)·64) tensors: no head
// transposes around attention. Grouped-query heads (query head h reads key/value head h / (H/Hkv))
// and the rotary embedding of q and k are applied inside the kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/attn_operand.h"
#include "tensor/tensor.h"

namespace st::ops::cuda {

constexpr int kFlashHeadDim = 64;

// f16/bf16, head dim 64, every pointer 16-byte aligned and every stride a multiple of 8 elements,
// B·H ≤ 65535.
bool flash_attention_supported(DType dt, int64_t head_dim, int64_t BH, std::initializer_list<AttnOperand> ops);

// q, out (B, H, T, 64), k, v (B, Hkv, T, 64), Hkv dividing H → out = softmax(q'·k'ᵀ/8 + causal
// mask)·v with q', k' roped when rope.on(); lse (B·H, T) f32 contiguous.
void flash_attention_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, AttnOperand q, AttnOperand k,
                         AttnOperand v, AttnOperand out, float* lse, const AttnRope& rope, cudaStream_t stream);

// dq (B, H, T, 64), dk, dv (B, Hkv, T, 64), written (=), from q, k, v, out, dout and the forward's
// lse: dk and dv of a key/value head summed over its query heads, dq and dk turned back through the
// rotation. Δ = rowsum(dout ∘ out) is computed here into a (B·H, T) f32 scratch. Deterministic:
// every output element is written once, no atomics.
void flash_attention_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, AttnOperand q, AttnOperand k,
                         AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                         AttnOperand dk, AttnOperand dv, const AttnRope& rope, cudaStream_t stream);

// Ring blocks (ops/block_attention.h), no rope: q, out (B, H, T, 64), k, v (B, Hkv, T, 64) of one
// key/value block of the same length T; full: no mask (every key precedes every query), else the
// causal diagonal block. out normalised within the block, lse (B·H, T) f32 (=).
void flash_block_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, bool full, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, float* lse, cudaStream_t stream);
// Its backward against the global lse and Δ (B·H, T) f32: dq_acc (B, H, T, 64) f32 contiguous
// += the block's dQ; dk, dv (B, Hkv, T, 64) written (=). Deterministic, no atomics.
void flash_block_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, bool full, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand dout, const float* lse, const float* delta, float* dq_acc,
                     AttnOperand dk, AttnOperand dv, cudaStream_t stream);

}  // namespace st::ops::cuda
