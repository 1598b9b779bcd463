// Flash attention (causal) on tensor cores for f16/bf16 with head dim 64 (ops/cuda/flash_attention.cu),
// used by ops/cuda/attention.cu whenever it applies; other dtypes and head dims take the CUDA-core
// kernels there. Operands are strided views, so the kernels read q, k, v straight out of the
// (B, T, 3·H·64) tensor a fused qkv projection writes and write the output (and dq, dk, dv)
// straight into (B, T, H·64) / (B, T, 3·H·64) tensors: no head transposes around attention.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "tensor/tensor.h"

namespace st::ops::cuda {

// Element (b, h, t, d) of an operand lives at ptr + b·sb + h·sh + t·st + d (d < 64 contiguous).
struct AttnOperand {
  void* ptr = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};

constexpr int kFlashHeadDim = 64;

// f16/bf16, head dim 64, every pointer 16-byte aligned and every stride a multiple of 8 elements,
// B·H ≤ 65535.
bool flash_attention_supported(DType dt, int64_t head_dim, int64_t BH, std::initializer_list<AttnOperand> ops);

// out (B, H, T, 64) = softmax(q·kᵀ/8 + causal mask)·v; lse (B·H, T) f32 contiguous.
void flash_attention_fwd(DType dt, int64_t B, int64_t H, int64_t T, AttnOperand q, AttnOperand k, AttnOperand v,
                         AttnOperand out, float* lse, cudaStream_t stream);

// dq, dk, dv (=) from q, k, v, out, dout and the forward's lse; Δ = rowsum(dout ∘ out) is computed
// here into a (B·H, T) f32 scratch. Deterministic: every output element is written once, no atomics.
void flash_attention_bwd(DType dt, int64_t B, int64_t H, int64_t T, AttnOperand q, AttnOperand k, AttnOperand v,
                         AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq, AttnOperand dk,
                         AttnOperand dv, cudaStream_t stream);

}  // namespace st::ops::cuda
