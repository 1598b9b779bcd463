// Causal attention on the CUDA cores, for what cuDNN's fused attention and the tensor-core flash
// kernels do not take: f32 (the exact path: no TF32), and f16/bf16 head dims other than 64 when
// cuDNN declines. Flash-style: no T×T buffer, the backward recomputes P from q, k and the lse.
// Operands are strided views (AttnOperand: element (b, h, t, d) at ptr + b·sb + h·sh + t·st + d,
// in elements), so the packed projection qkv (B, T, (H + 2·Hkv)·D) is read in place and dqkv
// written in place: no head split or join copies. Grouped-query heads: query head h reads key/value
// head h / (H/Hkv). Rotary embedding (rope.on()): q and k are rotated as they are loaded (element d
// reads its partner d ± D/2 too, ops/cuda/rope.cuh), dQ and dK turned back through a shared tile
// before they are stored.
//
// Work split: four threads per row ("a quad"), each holding D/4 of the row's features in
// registers; a dot product is four partial sums and two shuffles. 64 rows per block (256
// threads); key (forward, dQ) or query (dK, dV) tiles of 64 rows staged in shared memory, padded
// so that the four lanes of a quad read four different banks.
//   fwd   per query row t: scores of a key tile (chunks of 16 keys), online softmax (running max
//         and sum), o += p·v; lse = m + log l (natural log, the scaled scores: cuDNN's and the
//         flash kernels' convention, so any backend's backward takes any forward's lse)
//   bwd   Δ_t = Σ_d dO·O (one warp per row); dK, dV per key row s of a key/value head over the
//         group's query heads in order and their query tiles t ≥ s; dQ per query row t over the
//         key tiles s ≤ t. Every output element is written once: deterministic, no atomics.
// Scores, sums and accumulators are f32; inputs are widened as they are staged.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/flash_attention.h"
#include "tensor/dtype.h"

namespace st::ops::cuda {

constexpr int kCoreMaxHeadDim = 128;

// q, out (B, H, T, D), k, v (B, Hkv, T, D) strided, Hkv dividing H; lse (B·H, T) f32 contiguous.
// D ≤ kCoreMaxHeadDim (even with rope).
void core_attention_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int D, const AttnOperand& q,
                        const AttnOperand& k, const AttnOperand& v, const AttnOperand& out, float* lse,
                        const AttnRope& rope, cudaStream_t stream);
// + dout (B, H, T, D), lse as the forward wrote it → dq (B, H, T, D), dk, dv (B, Hkv, T, D)
// (written =; dk, dv summed over the group's query heads)
void core_attention_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int D, const AttnOperand& q,
                        const AttnOperand& k, const AttnOperand& v, const AttnOperand& out, const AttnOperand& dout,
                        const float* lse, const AttnOperand& dq, const AttnOperand& dk, const AttnOperand& dv,
                        const AttnRope& rope, cudaStream_t stream);

}  // namespace st::ops::cuda
