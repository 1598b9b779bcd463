// Causal attention through cuDNN's fused scaled-dot-product-attention engines (ops/cudnn/sdpa.cpp;
// ops/cudnn_stub when cuDNN is not built), and the choice between them and our own flash kernels.
//
// Operands are the same strided views the flash kernels take (attn_operand.h), so the GPT's
// fused qkv tensor goes in without head transposes; lse is the same natural-log log-sum-exp of the
// scaled scores, so a forward of one backend and a backward of the other agree. Grouped-query
// attention: k, v (and dk, dv) have Hkv heads, Hkv dividing H; cuDNN's graph reads key/value head
// h / (H/Hkv) for query head h and sums dk, dv over a group's heads itself.
//
// Which backend runs (ops/attention_backend.h's setting; launch/ sets it from ST_ATTENTION):
//   deterministic  (default) cuDNN with its deterministic backward (dQ written once, the engine
//                  keeps dP in its workspace: B·H·T² 16-bit values) where cuDNN takes the shape
//                  and that workspace is at most kDeterministicWorkspaceMax (ops/attention_backend.h),
//                  else flash; bitwise reproducible either way;
//   fast           cuDNN with its default backward, which adds dQ up with float atomics (its last
//                  bits may differ from run to run), where it takes the shape, else flash;
//   cudnn          as fast, but a shape cuDNN declines is an error (DeviceError), not a fallback;
//   flash          always our kernels (ops/cuda/flash_attention.cu), bitwise reproducible.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "ops/attention_backend.h"
#include "ops/cuda/flash_attention.h"

namespace st::ops::cuda {

using ops::AttentionBackend;
using ops::attention_backend;
using ops::set_attention_backend;

// f16/bf16 attention through cuDNN: q, out, dout, dq (B, H, T, D), k, v, dk, dv (B, Hkv, T, D),
// lse (B·H, T) f32. Returns false (nothing launched) when cuDNN cannot take this shape — not
// built, dtype, T not a multiple of 128 on cuDNN ≤ 9.15, no engine; the reason is kept for
// cudnn_sdpa_status(). A plan is built once per shape and stream, then reused. `before_run`, when
// given, runs on the stream after the plan is known and before cuDNN reads its operands (the
// rotated q, k copy is written there: nothing is written when cuDNN declines).
bool cudnn_sdpa_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                    AttnOperand v, AttnOperand out, float* lse, cudaStream_t stream,
                    const std::function<void()>& before_run = nullptr);
bool cudnn_sdpa_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                    AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                    AttnOperand dk, AttnOperand dv, bool deterministic, cudaStream_t stream,
                    const std::function<void()>& before_run = nullptr);

// One block of a context-parallel ring (ops/cuda/block_attention.cu), Tq = Tk = T: causal (the
// diagonal block) or unmasked (a past block). The forward writes out (normalised within the block)
// and the block's lse; the backward takes the query chunk's GLOBAL out and lse (the merged ones)
// and writes this block's dq (in the io dtype), dk, dv. False when cuDNN declines (as above; the
// deterministic workspace bound included): the caller takes the flash kernels.
bool cudnn_block_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, float* lse, bool causal, cudaStream_t stream);
bool cudnn_block_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                     AttnOperand dk, AttnOperand dv, bool causal, bool deterministic, cudaStream_t stream);

// "cuDNN 9.14.0: forward engine 2, backward engine 2, deterministic backward not used", and why
// cuDNN last declined a shape, if it did.
std::string cudnn_sdpa_status();
// How many forward / backward calls cuDNN ran since start (tests check the path really ran).
int64_t cudnn_sdpa_calls();

}  // namespace st::ops::cuda
