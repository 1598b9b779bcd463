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

}  // namespace st::ops
