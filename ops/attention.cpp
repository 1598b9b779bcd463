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

Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads) {
  const char* name = "causal_attention_qkv";
  check_defined(name, {qkv});
  if (heads < 1 || qkv.dim() != 3 || qkv.size(2) % (3 * heads) != 0 || qkv.size(2) == 0)
    ST_THROW(ShapeError, name << ": qkv " << shape_str(qkv.shape()) << " with " << heads
                              << " heads (expected (B, T, 3·heads·D))");
  const int64_t B = qkv.size(0), T = qkv.size(1), A = qkv.size(2) / 3, D = A / heads;
  if (qkv.is_cuda()) {  // every CUDA backend reads q, k, v in place (ops/cuda/attention.cu)
    Tensor x = qkv.contiguous().detach();                          // (B, T, 3A)
    Tensor out = Tensor::empty({B, T, A}, x.dtype(), x.device());  // (B, T, A)
    if (cuda::attention_qkv_supported(x, out, heads)) {
      Tensor lse = Tensor::empty({B * heads, T}, DType::f32, x.device());  // (B·H, T)
      {
        NoGradGuard ng;
        cuda::attention_qkv_fwd(x, out, lse, heads);
      }
      Tensor od = out.detach();
      attach_grad_fn(out, name, {qkv}, [x, od, lse, heads](const Tensor& g) {
        Tensor dout = contiguous_as(g, x.dtype());  // (B, T, A)
        Tensor dqkv = x.empty_like();               // (B, T, 3A)
        cuda::attention_qkv_bwd(x, od, lse, dout, dqkv, heads);
        return std::vector<Tensor>{dqkv};
      });
      return out;
    }
  }
  auto split_heads = [&](int64_t i) {  // (B, T, A) slice → (B, H, T, D)
    return qkv.narrow(2, i * A, A).reshape({B, T, heads, D}).transpose(1, 2).contiguous();
  };
  Tensor y = causal_attention(split_heads(0), split_heads(1), split_heads(2));  // (B, H, T, D)
  return y.transpose(1, 2).contiguous().reshape({B, T, A});                      // (B, T, A)
}

}  // namespace st::ops
