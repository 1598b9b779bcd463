// CUDA ring blocks (ops/block_attention.h): cuDNN's fused attention graphs (ops/cuda/sdpa_cudnn.h:
// the diagonal block causal, a past block unmasked; the backward from the query chunk's global
// output and lse) where the attention backend allows and cuDNN takes the block, else the flash
// kernels' Full / Acc instantiations (ops/cuda/flash_attention.cu) for f16/bf16 at head dim 64
// with Tq = Tk (the ring's chunks are of one length); and Δ = rowsum(dout ∘ out) in f32. Other
// dtypes, head dims and Tq ≠ Tk are a DeviceError (the CPU op takes them).
#include "ops/block_attention.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/sdpa_cudnn.h"

namespace st::ops::cuda {
namespace {

// (B, H, T, D) contiguous as a flash operand
AttnOperand operand(const Tensor& t) {
  const int64_t H = t.size(1), Tn = t.size(2), D = t.size(3);
  return {const_cast<void*>(t.data_ptr()), H * Tn * D, Tn * D, D};
}

void require_flash(const char* name, const Tensor& q, const Tensor& k, std::initializer_list<AttnOperand> ops) {
  if (q.size(2) != k.size(2) || !flash_attention_supported(q.dtype(), q.size(3), q.size(0) * q.size(1), ops))
    ST_THROW(DeviceError, name << ": CUDA block attention takes f16/bf16, head dim 64 and query and key blocks of one "
                                  "length, got q "
                               << shape_str(q.shape()) << ", k " << shape_str(k.shape()) << " in "
                               << dtype_name(q.dtype()) << " (the CPU op takes any)");
}

// cuDNN's fused graphs for a block: the backend allows them (not flash) and the blocks are of one
// length (the graphs take one T); whether cuDNN takes the shape is its own answer (false: flash)
bool use_cudnn(const Tensor& q, const Tensor& k) {
  return attention_backend() != AttentionBackend::Flash && q.size(2) == k.size(2);
}

// delta (rows) = Σ_d out·dout over rows of D, f32 in order of d (one thread per row)
__global__ void delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int64_t D) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int64_t c = 0; c < D; ++c) s = fmaf(out[r * D + c], dout[r * D + c], s);
    delta[r] = s;
  }
}

}  // namespace

void block_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask, Tensor& out, Tensor& lse) {
  const AttnOperand oq = operand(q), ok = operand(k), ov = operand(v), oo = operand(out);
  if (use_cudnn(q, k) && cudnn_block_fwd(q.dtype(), q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), oq, ok, ov,
                                         oo, lse.data<float>(), mask == BlockMask::causal, current_stream()))
    return;
  require_flash("block_attention_fwd", q, k, {oq, ok, ov, oo});
  flash_block_fwd(q.dtype(), q.size(0), q.size(1), k.size(1), q.size(2), mask == BlockMask::full, oq, ok, ov, oo,
                  lse.data<float>(), current_stream());
}

void attention_delta(const Tensor& out, const Tensor& dout, Tensor& delta) {
  Tensor o32 = out.to(DType::f32).contiguous(), g32 = dout.to(DType::f32).contiguous();  // (B, H, T, D)
  const int64_t rows = delta.numel(), D = out.size(3);
  if (rows == 0) return;
  delta_kernel<<<grid_for(rows, 256), 256, 0, current_stream()>>>(o32.data<float>(), g32.data<float>(),
                                                                  delta.data<float>(), rows, D);
  CHECK_LAUNCH();
}

void block_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, BlockMask mask, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& out) {
  const AttnOperand oq = operand(q), ok = operand(k), ov = operand(v), og = operand(dout), odk = operand(dk),
                    odv = operand(dv);
  if (out.defined() && use_cudnn(q, k)) {
    Tensor dq_block = q.empty_like();  // (B, H, T, D) in q's dtype: cuDNN writes the block's dq (=)
    if (cudnn_block_bwd(q.dtype(), q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), oq, ok, ov, operand(out), og,
                        lse.data<float>(), operand(dq_block), odk, odv, mask == BlockMask::causal,
                        attention_backend() == AttentionBackend::Deterministic, current_stream())) {
      dq.add_(dq_block);  // f32 += the block's share
      return;
    }
  }
  require_flash("block_attention_bwd", q, k, {oq, ok, ov, og, odk, odv});
  flash_block_bwd(q.dtype(), q.size(0), q.size(1), k.size(1), q.size(2), mask == BlockMask::full, oq, ok, ov, og,
                  lse.data<float>(), delta.data<float>(), dq.data<float>(), odk, odv, current_stream());
}

}  // namespace st::ops::cuda
