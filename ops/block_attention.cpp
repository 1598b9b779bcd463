// Block attention's entry points (ops/block_attention.h): shape, dtype and device checks, then the
// CPU kernels (ops/cpu/block_attention.cpp) or the CUDA ones (ops/cuda/block_attention.cu).
#include "ops/block_attention.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

const char* block_mask_name(BlockMask mask) { return mask == BlockMask::causal ? "causal" : "full"; }

namespace {

// q (B, H, Tq, D), k, v (B, Hkv, Tk, D), Hkv | H, causal ⇒ Tq = Tk
void check_block(const char* name, const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask) {
  check_defined(name, {q, k, v});
  check_same_device(name, {q, k, v});
  check_same_dtype(name, {q, k, v});
  check_floating(name, q);
  const bool ok = q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && q.size(0) == k.size(0) &&
                  q.size(3) == k.size(3) && q.size(3) > 0 && k.size(1) > 0 && q.size(1) % k.size(1) == 0 &&
                  q.size(2) > 0 && k.size(2) > 0 && (mask == BlockMask::full || q.size(2) == k.size(2));
  if (!ok)
    ST_THROW(ShapeError, name << " (" << block_mask_name(mask) << "): q " << shape_str(q.shape()) << ", k "
                              << shape_str(k.shape()) << ", v " << shape_str(v.shape())
                              << " (expected q (B, H, Tq, D), k = v (B, Hkv, Tk, D), Hkv dividing H, Tq = Tk "
                                 "for the causal block)");
}

// a (B, H, Tq) f32 statistic of q
void check_rows(const char* name, const char* what, const Tensor& s, const Tensor& q) {
  check_defined(name, {s});
  check_dtype(name, s, {DType::f32});
  check_device(name, s, q.device());
  ST_CHECK(s.shape() == Shape({q.size(0), q.size(1), q.size(2)}), ShapeError,
           name << ": " << what << " " << shape_str(s.shape()) << " for q " << shape_str(q.shape())
                << " (expected (B, H, Tq))");
}

}  // namespace

BlockAttention block_attention_fwd(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, BlockMask mask) {
  const char* name = "block_attention_fwd";
  check_block(name, q_in, k_in, v_in, mask);
  NoGradGuard ng;
  Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  BlockAttention r{q.empty_like(), Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32, q.device())};
  if (q.is_cuda())
    cuda::block_attention_fwd(q, k, v, mask, r.out, r.lse);
  else
    cpu::block_attention_fwd(q, k, v, mask, r.out, r.lse);
  return r;
}

Tensor attention_delta(const Tensor& out_in, const Tensor& dout_in) {
  const char* name = "attention_delta";
  check_defined(name, {out_in, dout_in});
  check_same_device(name, {out_in, dout_in});
  check_floating(name, out_in);
  check_floating(name, dout_in);
  ST_CHECK(out_in.dim() == 4 && dout_in.shape() == out_in.shape(), ShapeError,
           name << ": out " << shape_str(out_in.shape()) << ", dout " << shape_str(dout_in.shape())
                << " (expected two equal (B, H, T, D) shapes)");
  NoGradGuard ng;
  Tensor delta = Tensor::empty({out_in.size(0), out_in.size(1), out_in.size(2)}, DType::f32, out_in.device());
  if (out_in.is_cuda())
    cuda::attention_delta(out_in.contiguous(), dout_in.contiguous(), delta);
  else
    cpu::attention_delta(out_in.contiguous(), dout_in.contiguous(), delta);
  return delta;
}

BlockGrads block_attention_bwd(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& dout_in,
                               const Tensor& lse, const Tensor& delta, BlockMask mask, Tensor& dq,
                               const Tensor& out_in) {
  const char* name = "block_attention_bwd";
  check_block(name, q_in, k_in, v_in, mask);
  check_defined(name, {dout_in, dq});
  check_floating(name, dout_in);
  ST_CHECK(dout_in.shape() == q_in.shape() && dq.shape() == q_in.shape(), ShapeError,
           name << ": dout " << shape_str(dout_in.shape()) << ", dq " << shape_str(dq.shape()) << " for q "
                << shape_str(q_in.shape()) << " (expected q's shape)");
  check_dtype(name, dq, {DType::f32});
  check_device(name, dq, q_in.device());
  ST_CHECK(dq.is_contiguous(), ValueError, name << ": dq is an accumulator and must be contiguous");
  check_rows(name, "lse", lse, q_in);
  check_rows(name, "delta", delta, q_in);
  NoGradGuard ng;
  Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  Tensor dout = contiguous_as(dout_in, q.dtype());  // the kernels read it in q's dtype
  BlockGrads g{k.empty_like(), v.empty_like()};
  if (out_in.defined())
    ST_CHECK(out_in.shape() == q_in.shape() && out_in.device() == q_in.device(), ShapeError,
             name << ": out " << shape_str(out_in.shape()) << " for q " << shape_str(q_in.shape())
                  << " (expected q's shape, on its device)");
  if (q.is_cuda())
    cuda::block_attention_bwd(q, k, v, dout, lse.contiguous(), delta.contiguous(), mask, dq, g.dk, g.dv,
                              out_in.defined() ? contiguous_as(out_in, q.dtype()) : Tensor());
  else
    cpu::block_attention_bwd(q, k, v, dout, lse.contiguous(), delta.contiguous(), mask, dq, g.dk, g.dv);
  return g;
}

}  // namespace st::ops
