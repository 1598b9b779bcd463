// The rotated copy of q and k that cuDNN's fused attention reads when the call has rotary
// embedding (ops/cuda/attention.cu). cuDNN's graph takes its operands from memory and its fused
// engines have no operation that rotates q and k as they are loaded (no kernel of ours prepares
// its operands either), so the cuDNN path writes q', k' in one pass per call — in the forward and
// again, recomputed rather than kept, in the backward — and after cuDNN's backward turns dq', dk'
// back in place, one more pass. The flash and CUDA-core kernels need neither: they rotate in their
// loads. Both passes compute ops/rope.h's expressions (ops/cuda/rope.cuh), so q', k' have the bits
// the other kernels rotate to.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attn_operand.h"
#include "tensor/dtype.h"

namespace st::ops::cuda {

// qkv (B, T, (H + 2·Hkv)·D) → qk (B, T, (H + Hkv)·D) = [q' heads | k' heads], row t of every head
// rotated at position rope.offset + t. Both contiguous, of dtype dt.
void rope_qk_copy(DType dt, const void* qkv, void* qk, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                  const AttnRope& rope, cudaStream_t stream);

// dqkv (B, T, (H + 2·Hkv)·D): the first (H + Hkv)·D of every row (dq', dk' of the rotated heads)
// replaced by Rᵀ·(…) in place (f32 arithmetic, one rounding into dt); the dv heads untouched.
void rope_back_qk(DType dt, void* dqkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, const AttnRope& rope,
                  cudaStream_t stream);

}  // namespace st::ops::cuda
