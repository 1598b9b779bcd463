// CUDA causal attention, q, k, v, out (B, H, T, D), lse (B, H, T) f32, and the packed op on the
// (B, T, (H + 2·Hkv)·D) projection with grouped-query heads and rotary embedding. No T×T score
// matrix is ever written to global memory. Backends, in order: cuDNN's fused attention
// (ops/cudnn/sdpa.cpp; f16/bf16, when ST_ATTENTION allows it and cuDNN takes the shape), the
// tensor-core flash kernels (ops/cuda/flash_attention.cu; f16/bf16, D = 64), else the CUDA-core
// kernels (ops/cuda/attention_cores.cu; f32, and any D ≤ 128). All take strided views, so the
// packed op reads q, k, v in place in qkv and writes dqkv in place: no head transposes for any
// dtype. They share the lse convention, so any backend's backward takes any backend's forward.
// Rotary embedding: the flash and CUDA-core kernels rotate q and k in their loads; cuDNN reads a
// rotated copy of q and k (B, T, (H + Hkv)·D) written in one pass just before it runs (forward,
// and again in backward, whose dq', dk' are then turned back in place: ops/cuda/rope_qk.h).
#include "ops/attention.h"
#include "ops/cuda/attention_cores.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/rope_qk.h"
#include "ops/cuda/sdpa_cudnn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace st::ops::cuda {
namespace {

// (B, H, T, D) contiguous as a flash operand
AttnOperand contiguous_operand(const Tensor& t) {
  const int64_t H = t.size(1), Tn = t.size(2), D = t.size(3);
  return {const_cast<void*>(t.data_ptr()), H * Tn * D, Tn * D, D};
}

// the heads of D starting at column `col` of x (B, T, W) as an operand: (b, h, t, d) at
// b·T·W + t·W + col + h·D + d
AttnOperand packed_operand(const Tensor& x, int64_t col, int64_t D) {
  const int64_t Tn = x.size(1), W = x.size(2);
  auto* p = static_cast<unsigned char*>(const_cast<void*>(x.data_ptr())) + col * dtype_size(x.dtype());
  return {p, Tn * W, D, W};
}

// the device tables of `rope` (uploaded at their first CUDA use) at position offset `offset`
AttnRope rope_args(const RopeTable* rope, int64_t offset) {
  if (!rope) return {};
  return {rope->cos(Device::cuda).data<float>(), rope->sin(Device::cuda).data<float>(), offset};
}

bool deterministic() { return attention_backend() == AttentionBackend::Deterministic; }

// Runs cuDNN's fused attention when the backend allows it; false: take our kernels. With
// the cudnn backend a shape cuDNN declines is an error rather than a silent fallback.
template <class Run>
bool try_cudnn(Run run) {
  const AttentionBackend b = attention_backend();
  if (b == AttentionBackend::Flash) return false;
  if (run()) return true;
  if (b == AttentionBackend::Cudnn)
    ST_THROW(DeviceError, "causal_attention: the cudnn attention backend (ST_ATTENTION=cudnn) but cuDNN declined the shape (" << cudnn_sdpa_status()
                                                                                                 << ")");
  return false;
}

}  // namespace


// launchers

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  check_contiguous_cuda("causal_attention", {&q, &k, &v, &out, &lse});
  const int64_t BH = q.size(0) * q.size(1), Tn = q.size(2);
  const int D = static_cast<int>(q.size(3));
  if (BH == 0 || Tn == 0) return;
  {
    AttnOperand oq = contiguous_operand(q), ok = contiguous_operand(k), ov = contiguous_operand(v),
                oo = contiguous_operand(out);
    if (try_cudnn([&] {
          return cudnn_sdpa_fwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, D, oq, ok, ov, oo, lse.data<float>(),
                                current_stream());
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo}))
      return flash_attention_fwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, oq, ok, ov, oo, lse.data<float>(),
                                 {}, current_stream());
  }
  core_attention_fwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, D, contiguous_operand(q), contiguous_operand(k),
                     contiguous_operand(v), contiguous_operand(out), lse.data<float>(), {}, current_stream());
}

void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_contiguous_cuda("causal_attention", {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv});
  const int64_t BH = q.size(0) * q.size(1), Tn = q.size(2);
  const int D = static_cast<int>(q.size(3));
  if (BH == 0 || Tn == 0) return;
  cudaStream_t stream = current_stream();
  {
    AttnOperand oq = contiguous_operand(q), ok = contiguous_operand(k), ov = contiguous_operand(v),
                oo = contiguous_operand(out), og = contiguous_operand(dout), dq_ = contiguous_operand(dq),
                dk_ = contiguous_operand(dk), dv_ = contiguous_operand(dv);
    if (try_cudnn([&] {
          return cudnn_sdpa_bwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, D, oq, ok, ov, oo, og,
                                lse.data<float>(), dq_, dk_, dv_, deterministic(), stream);
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo, og, dq_, dk_, dv_}))
      return flash_attention_bwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, oq, ok, ov, oo, og,
                                 lse.data<float>(), dq_, dk_, dv_, {}, stream);
  }
  core_attention_bwd(q.dtype(), q.size(0), q.size(1), q.size(1), Tn, D, contiguous_operand(q), contiguous_operand(k),
                     contiguous_operand(v), contiguous_operand(out), contiguous_operand(dout), lse.data<float>(),
                     contiguous_operand(dq), contiguous_operand(dk), contiguous_operand(dv), {}, stream);
}

// qkv (B, T, (H + 2·Hkv)·D) → out (B, T, H·D), lse (B·H, T): every backend on strided views
// (cuDNN, the flash kernels where they apply, else the CUDA-core kernels), so any float dtype and
// D ≤ 128
bool attention_qkv_supported(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t D = qkv.size(2) / (heads + 2 * kv_heads);
  return D >= 1 && D <= kCoreMaxHeadDim && qkv.size(0) * heads <= 65535 &&
         (qkv.dtype() == DType::f32 || qkv.dtype() == DType::f16 || qkv.dtype() == DType::bf16);
}

namespace {

// The packed call's shape and operands: q heads at column 0 of qkv, k heads at H·D, v heads at
// (H + Hkv)·D; with rope, cuDNN's rotated copy qk (B, T, (H + Hkv)·D) = [q' | k'].
struct Packed {
  DType dt;
  int64_t B, T, H, Hkv, D;
  AttnOperand q, k, v;
  AttnRope rope;
  Packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, const RopeTable* table, int64_t offset)
      : dt(qkv.dtype()), B(qkv.size(0)), T(qkv.size(1)), H(heads), Hkv(kv_heads),
        D(qkv.size(2) / (heads + 2 * kv_heads)), q(packed_operand(qkv, 0, D)), k(packed_operand(qkv, H * D, D)),
        v(packed_operand(qkv, (H + Hkv) * D, D)), rope(rope_args(table, offset)) {}
  Tensor rotated_copy() const { return Tensor::empty({B, T, (H + Hkv) * D}, dt, Device::cuda); }  // (B, T, (H + Hkv)·D)
};

}  // namespace

void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads, int64_t kv_heads,
                       const RopeTable* rope, int64_t position_offset) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse});
  const Packed p(qkv, heads, kv_heads, rope, position_offset);
  const AttnOperand o = packed_operand(out, 0, p.D);
  cudaStream_t stream = current_stream();
  if (try_cudnn([&] {
        if (!p.rope.on())
          return cudnn_sdpa_fwd(p.dt, p.B, p.H, p.Hkv, p.T, p.D, p.q, p.k, p.v, o, lse.data<float>(), stream);
        Tensor qk = p.rotated_copy();
        return cudnn_sdpa_fwd(p.dt, p.B, p.H, p.Hkv, p.T, p.D, packed_operand(qk, 0, p.D),
                              packed_operand(qk, p.H * p.D, p.D), p.v, o, lse.data<float>(), stream, [&] {
                                rope_qk_copy(p.dt, qkv.data_ptr(), qk.data_ptr(), p.B, p.T, p.H, p.Hkv, p.D, p.rope,
                                             stream);
                              });
      }))
    return;
  if (flash_attention_supported(p.dt, p.D, p.B * p.H, {p.q, p.k, p.v, o}))
    return flash_attention_fwd(p.dt, p.B, p.H, p.Hkv, p.T, p.q, p.k, p.v, o, lse.data<float>(), p.rope, stream);
  core_attention_fwd(p.dt, p.B, p.H, p.Hkv, p.T, static_cast<int>(p.D), p.q, p.k, p.v, o, lse.data<float>(), p.rope,
                     stream);
}

void attention_qkv_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv,
                       int64_t heads, int64_t kv_heads, const RopeTable* rope, int64_t position_offset) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse, &dout, &dqkv});
  const Packed p(qkv, heads, kv_heads, rope, position_offset);
  const int64_t D = p.D;
  const AttnOperand o = packed_operand(out, 0, D), g = packed_operand(dout, 0, D), dq = packed_operand(dqkv, 0, D),
                    dk = packed_operand(dqkv, p.H * D, D), dv = packed_operand(dqkv, (p.H + p.Hkv) * D, D);
  cudaStream_t stream = current_stream();
  if (try_cudnn([&] {
        if (!p.rope.on())
          return cudnn_sdpa_bwd(p.dt, p.B, p.H, p.Hkv, p.T, D, p.q, p.k, p.v, o, g, lse.data<float>(), dq, dk, dv,
                                deterministic(), stream);
        Tensor qk = p.rotated_copy();
        const bool ran = cudnn_sdpa_bwd(
            p.dt, p.B, p.H, p.Hkv, p.T, D, packed_operand(qk, 0, D), packed_operand(qk, p.H * D, D), p.v, o, g,
            lse.data<float>(), dq, dk, dv, deterministic(), stream,
            [&] { rope_qk_copy(p.dt, qkv.data_ptr(), qk.data_ptr(), p.B, p.T, p.H, p.Hkv, D, p.rope, stream); });
        if (ran) rope_back_qk(p.dt, dqkv.data_ptr(), p.B, p.T, p.H, p.Hkv, D, p.rope, stream);  // dq, dk = Rᵀ·(dq', dk')
        return ran;
      }))
    return;
  if (flash_attention_supported(p.dt, D, p.B * p.H, {p.q, p.k, p.v, o, g, dq, dk, dv}))
    return flash_attention_bwd(p.dt, p.B, p.H, p.Hkv, p.T, p.q, p.k, p.v, o, g, lse.data<float>(), dq, dk, dv, p.rope,
                               stream);
  core_attention_bwd(p.dt, p.B, p.H, p.Hkv, p.T, static_cast<int>(D), p.q, p.k, p.v, o, g, lse.data<float>(), dq, dk,
                     dv, p.rope, stream);
}

}  // namespace st::ops::cuda
