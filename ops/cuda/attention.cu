// CUDA causal attention, q, k, v, out (B, H, T, D), lse (B, H, T) f32, and the packed op on the
// (B, T, 3·H·D) projection. No T×T score matrix is ever written to global memory. Backends, in
// order: cuDNN's fused attention (ops/cudnn/sdpa.cpp; f16/bf16, when ST_ATTENTION allows it and
// cuDNN takes the shape), the tensor-core flash kernels (ops/cuda/flash_attention.cu; f16/bf16,
// D = 64), else the CUDA-core kernels (ops/cuda/attention_cores.cu; f32, and any D ≤ 128). All
// take strided views, so the packed op reads q, k, v in place in qkv and writes dqkv in place: no
// head transposes for any dtype. They share the lse convention, so any backend's backward takes
// any backend's forward.
#include "ops/attention.h"
#include "ops/cuda/attention_cores.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"
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

// head h of part i ∈ {0 q, 1 k, 2 v} of x (B, T, parts·H·D) as a flash operand
AttnOperand packed_operand(const Tensor& x, int64_t H, int64_t D, int i) {
  const int64_t Tn = x.size(1), W = x.size(2);
  auto* p = static_cast<unsigned char*>(const_cast<void*>(x.data_ptr())) + i * H * D * dtype_size(x.dtype());
  return {p, Tn * W, D, W};
}

std::atomic<int> g_backend{-1};  // AttentionBackend, -1: not decided yet (read ST_ATTENTION)

bool deterministic() { return attention_backend() == AttentionBackend::Deterministic; }

// Runs cuDNN's fused attention when the backend allows it; false: take our kernels. With
// ST_ATTENTION=cudnn a shape cuDNN declines is an error rather than a silent fallback.
template <class Run>
bool try_cudnn(Run run) {
  const AttentionBackend b = attention_backend();
  if (b == AttentionBackend::Flash) return false;
  if (run()) return true;
  if (b == AttentionBackend::Cudnn)
    ST_THROW(DeviceError, "causal_attention: ST_ATTENTION=cudnn but cuDNN declined the shape (" << cudnn_sdpa_status()
                                                                                                 << ")");
  return false;
}

}  // namespace

AttentionBackend attention_backend() {
  int b = g_backend.load();
  if (b < 0) {
    const char* e = std::getenv("ST_ATTENTION");
    if (!e || !*e || !std::strcmp(e, "deterministic"))
      b = static_cast<int>(AttentionBackend::Deterministic);
    else if (!std::strcmp(e, "fast"))
      b = static_cast<int>(AttentionBackend::Fast);
    else if (!std::strcmp(e, "cudnn"))
      b = static_cast<int>(AttentionBackend::Cudnn);
    else if (!std::strcmp(e, "flash"))
      b = static_cast<int>(AttentionBackend::Flash);
    else
      ST_THROW(ValueError, "ST_ATTENTION=" << e << ": expected deterministic, fast, cudnn or flash");
    g_backend.store(b);
  }
  return static_cast<AttentionBackend>(b);
}

void set_attention_backend(AttentionBackend b) { g_backend.store(static_cast<int>(b)); }

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
          return cudnn_sdpa_fwd(q.dtype(), q.size(0), q.size(1), Tn, D, oq, ok, ov, oo, lse.data<float>(),
                                current_stream());
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo}))
      return flash_attention_fwd(q.dtype(), q.size(0), q.size(1), Tn, oq, ok, ov, oo, lse.data<float>(),
                                 current_stream());
  }
  core_attention_fwd(q.dtype(), q.size(0), q.size(1), Tn, D, contiguous_operand(q), contiguous_operand(k),
                     contiguous_operand(v), contiguous_operand(out), lse.data<float>(), current_stream());
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
          return cudnn_sdpa_bwd(q.dtype(), q.size(0), q.size(1), Tn, D, oq, ok, ov, oo, og, lse.data<float>(), dq_,
                                dk_, dv_, deterministic(), stream);
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo, og, dq_, dk_, dv_}))
      return flash_attention_bwd(q.dtype(), q.size(0), q.size(1), Tn, oq, ok, ov, oo, og, lse.data<float>(), dq_,
                                 dk_, dv_, stream);
  }
  core_attention_bwd(q.dtype(), q.size(0), q.size(1), Tn, D, contiguous_operand(q), contiguous_operand(k),
                     contiguous_operand(v), contiguous_operand(out), contiguous_operand(dout), lse.data<float>(),
                     contiguous_operand(dq), contiguous_operand(dk), contiguous_operand(dv), stream);
}

// qkv (B, T, 3·H·D) → out (B, T, H·D), lse (B·H, T): every backend on strided views (cuDNN, the
// flash kernels where they apply, else the CUDA-core kernels), so any float dtype and D ≤ 128
bool attention_qkv_supported(const Tensor& qkv, const Tensor& out, int64_t heads) {
  (void)out;
  const int64_t D = qkv.size(2) / (3 * heads);
  return D >= 1 && D <= kCoreMaxHeadDim && qkv.size(0) * heads <= 65535 &&
         (qkv.dtype() == DType::f32 || qkv.dtype() == DType::f16 || qkv.dtype() == DType::bf16);
}

void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse});
  const int64_t D = qkv.size(2) / (3 * heads);
  const AttnOperand q = packed_operand(qkv, heads, D, 0), k = packed_operand(qkv, heads, D, 1),
                    v = packed_operand(qkv, heads, D, 2), o = packed_operand(out, heads, D, 0);
  if (try_cudnn([&] {
        return cudnn_sdpa_fwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), D, q, k, v, o, lse.data<float>(),
                              current_stream());
      }))
    return;
  if (flash_attention_supported(qkv.dtype(), D, qkv.size(0) * heads, {q, k, v, o}))
    return flash_attention_fwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), q, k, v, o, lse.data<float>(),
                               current_stream());
  core_attention_fwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), static_cast<int>(D), q, k, v, o, lse.data<float>(),
                     current_stream());
}

void attention_qkv_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv,
                       int64_t heads) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse, &dout, &dqkv});
  const int64_t D = qkv.size(2) / (3 * heads);
  const AttnOperand q = packed_operand(qkv, heads, D, 0), k = packed_operand(qkv, heads, D, 1),
                    v = packed_operand(qkv, heads, D, 2), o = packed_operand(out, heads, D, 0),
                    g = packed_operand(dout, heads, D, 0), dq = packed_operand(dqkv, heads, D, 0),
                    dk = packed_operand(dqkv, heads, D, 1), dv = packed_operand(dqkv, heads, D, 2);
  if (try_cudnn([&] {
        return cudnn_sdpa_bwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), D, q, k, v, o, g, lse.data<float>(), dq,
                              dk, dv, deterministic(), current_stream());
      }))
    return;
  if (flash_attention_supported(qkv.dtype(), D, qkv.size(0) * heads, {q, k, v, o, g, dq, dk, dv}))
    return flash_attention_bwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), q, k, v, o, g, lse.data<float>(), dq,
                               dk, dv, current_stream());
  core_attention_bwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), static_cast<int>(D), q, k, v, o, g,
                     lse.data<float>(), dq, dk, dv, current_stream());
}

}  // namespace st::ops::cuda
