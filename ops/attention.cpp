#include "ops/attention.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor causal_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  const char* name = "causal_attention";
  check_same_device(name, {q_in, k_in, v_in});
  check_same_dtype(name, {q_in, k_in, v_in});
  check_floating(name, q_in);
  if (q_in.dim() != 4 || k_in.shape() != q_in.shape() || v_in.shape() != q_in.shape() || q_in.size(-1) == 0)
    ST_THROW(ShapeError, name << ": q " << shape_str(q_in.shape()) << ", k " << shape_str(k_in.shape()) << ", v "
                              << shape_str(v_in.shape()) << " (expected three equal (B, H, T, D) shapes)");
  const DType dt = q_in.dtype();
  const Device dev = q_in.device();
  Tensor q = contiguous_as(q_in, dt), k = contiguous_as(k_in, dt), v = contiguous_as(v_in, dt);  // (B, H, T, D)
  Tensor out = q.empty_like();                                                                     // (B, H, T, D)
  Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32, dev);                // (B, H, T)
  {
    NoGradGuard ng;
    if (q.is_cuda())
      cuda::attention_fwd(q, k, v, out, lse);
    else
      cpu::attention_fwd(q, k, v, out, lse);
  }
  // backward: dout (B, H, T, D) → dq, dk, dv (B, H, T, D), fresh tensors
  Tensor od = out.detach();
  attach_grad_fn(out, name, {q_in, k_in, v_in}, [q, k, v, od, lse](const Tensor& g) {
    Tensor dout = contiguous_as(g, q.dtype());
    Tensor dq = q.empty_like(), dk = k.empty_like(), dv = v.empty_like();
    if (q.is_cuda())
      cuda::attention_bwd(q, k, v, od, lse, dout, dq, dk, dv);
    else
      cpu::attention_bwd(q, k, v, od, lse, dout, dq, dk, dv);
    return std::vector<Tensor>{dq, dk, dv};
  });
  return out;
}

namespace {

// The packed op on `qkv` (B, T, (H + 2·Hkv)·D) through the backend kernels: the CUDA ones (any
// backend reads q, k, v in place: ops/cuda/attention.cu) or the CPU grouped-query kernel.
Tensor packed_attention(const char* name, const Tensor& qkv, int64_t heads, int64_t kv_heads, const RopeTable* rope,
                        int64_t offset) {
  const int64_t B = qkv.size(0), T = qkv.size(1), A = heads * (qkv.size(2) / (heads + 2 * kv_heads));
  Tensor x = qkv.contiguous().detach();                                // (B, T, W)
  Tensor out = Tensor::empty({B, T, A}, x.dtype(), x.device());        // (B, T, H·D)
  Tensor lse = Tensor::empty({B * heads, T}, DType::f32, x.device());  // (B·H, T)
  {
    NoGradGuard ng;
    if (x.is_cuda())
      cuda::attention_qkv_fwd(x, out, lse, heads, kv_heads, rope, offset);
    else
      cpu::attention_qkv_fwd(x, out, lse, heads, kv_heads, rope, offset);
  }
  // backward: dout (B, T, H·D) → dqkv (B, T, W), a fresh tensor
  Tensor od = out.detach();
  attach_grad_fn(out, name, {qkv}, [x, od, lse, heads, kv_heads, rope, offset](const Tensor& g) {
    Tensor dout = contiguous_as(g, x.dtype());  // (B, T, H·D)
    Tensor dqkv = x.empty_like();               // (B, T, W)
    if (x.is_cuda())
      cuda::attention_qkv_bwd(x, od, lse, dout, dqkv, heads, kv_heads, rope, offset);
    else
      cpu::attention_qkv_bwd(x, lse, dout, dqkv, heads, kv_heads, rope, offset);
    return std::vector<Tensor>{dqkv};
  });
  return out;
}

}  // namespace

Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const RopeTable* rope,
                            int64_t position_offset) {
  const char* name = "causal_attention_qkv";
  check_defined(name, {qkv});
  check_floating(name, qkv);
  const int64_t parts = heads + 2 * kv_heads;
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || qkv.dim() != 3 || qkv.size(2) == 0 ||
      qkv.size(2) % parts != 0)
    ST_THROW(ShapeError, name << ": qkv " << shape_str(qkv.shape()) << " with " << heads << " query and " << kv_heads
                              << " key/value heads (expected (B, T, (heads + 2·kv_heads)·D), kv_heads dividing heads)");
  const int64_t T = qkv.size(1), D = qkv.size(2) / parts;
  if (rope) {
    ST_CHECK(rope->head_dim() == D, ShapeError,
             name << ": the rotary table is for head dim " << rope->head_dim() << ", the heads have " << D);
    ST_CHECK(position_offset >= 0 && position_offset + T <= rope->positions(), ValueError,
             name << ": positions [" << position_offset << ", " << position_offset + T << ") outside the rotary table's "
                  << rope->positions());
  }
  if (qkv.is_cuda() && !cuda::attention_qkv_supported(qkv, heads, kv_heads))
    ST_THROW(ShapeError, name << ": CUDA takes head dims up to 128 and B·heads ≤ 65535, got qkv "
                              << shape_str(qkv.shape()) << " with " << heads << " heads of " << D);
  return packed_attention(name, qkv, heads, kv_heads, rope, position_offset);
}

Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads) {
  const char* name = "causal_attention_qkv";
  check_defined(name, {qkv});
  if (heads < 1 || qkv.dim() != 3 || qkv.size(2) % (3 * heads) != 0 || qkv.size(2) == 0)
    ST_THROW(ShapeError, name << ": qkv " << shape_str(qkv.shape()) << " with " << heads
                              << " heads (expected (B, T, 3·heads·D))");
  const int64_t B = qkv.size(0), T = qkv.size(1), A = qkv.size(2) / 3, D = A / heads;
  if (qkv.is_cuda() && cuda::attention_qkv_supported(qkv, heads, heads))
    return packed_attention(name, qkv, heads, heads, nullptr, 0);
  auto split_heads = [&](int64_t i) {  // (B, T, A) slice → (B, H, T, D)
    return qkv.narrow(2, i * A, A).reshape({B, T, heads, D}).transpose(1, 2).contiguous();
  };
  Tensor y = causal_attention(split_heads(0), split_heads(1), split_heads(2));  // (B, H, T, D)
  return y.transpose(1, 2).contiguous().reshape({B, T, A});                      // (B, T, A)
}

}  // namespace st::ops
