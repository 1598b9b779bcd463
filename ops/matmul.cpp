#include "ops/matmul.h"

#include "ops/check.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

Tensor matmul_raw(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
  check_same_device("matmul", {a_in, b_in});
  check_same_dtype("matmul", {a_in, b_in});
  check_floating("matmul", a_in);
  if (a_in.dim() < 2 || b_in.dim() < 2)
    ST_THROW(ShapeError, "matmul: operands need ≥ 2 dims, got " << shape_str(a_in.shape()) << " and "
                                                                 << shape_str(b_in.shape()));
  NoGradGuard ng;
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int64_t M = ta ? a.size(-1) : a.size(-2), Ka = ta ? a.size(-2) : a.size(-1);
  const int64_t Kb = tb ? b.size(-1) : b.size(-2), N = tb ? b.size(-2) : b.size(-1);
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  bool shared = b.dim() == 2;
  if (Ka != Kb || (!shared && batch_a != batch_b))
    ST_THROW(ShapeError, "matmul: " << shape_str(a.shape()) << (ta ? "ᵀ" : "") << " · " << shape_str(b.shape())
                                    << (tb ? "ᵀ" : "") << " do not fit");
  int64_t batch = shape_numel(batch_a);
  Shape out_shape = batch_a;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor c = Tensor::empty(out_shape, a.dtype(), a.device());
  if (a.is_cuda())
    cuda::gemm(a, b, c, ta, tb, batch, M, N, Ka, shared);
  else
    cpu::gemm(a, b, c, ta, tb, batch, M, N, Ka, shared);
  return c;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_defined("matmul", {a, b});
  if (b.dim() == 2 && a.dim() > 2 && ta)
    ST_THROW(ShapeError, "matmul: a transposed batched operand " << shape_str(a.shape()) << " with a shared 2-d "
                                                                 << shape_str(b.shape()) << " is not supported");
  Tensor out = matmul_raw(a, b, ta, tb);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  attach_grad_fn(out, "matmul", {a, b}, [ad, bd, ta, tb, ga, gb](const Tensor& g) {
    Tensor da, db;
    // C = op(A)·op(B):  dop(A) = dC·op(B)ᵀ,  dop(B) = op(A)ᵀ·dC
    if (ga) da = ta ? matmul_raw(bd, g, tb, true) : matmul_raw(g, bd, false, !tb);
    if (gb) {
      if (bd.dim() == 2 && ad.dim() > 2) {  // shared weight: fold the batch into M
        Tensor a2 = ad.reshape({-1, ad.size(-1)});
        Tensor g2 = g.reshape({-1, g.size(-1)});
        db = tb ? matmul_raw(g2, a2, true, false) : matmul_raw(a2, g2, true, false);
      } else {
        db = tb ? matmul_raw(g, ad, true, ta) : matmul_raw(ad, g, !ta, false);
      }
    }
    return std::vector<Tensor>{da, db};
  });
  return out;
}

namespace {

bool half_cuda(const Tensor& t) { return t.is_cuda() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16); }

// x2 (M, K) · w (K, N) + bias (N) with the bias in the GEMM's epilogue and, in backward, the bias
// gradient in the weight-gradient GEMM's; undefined when cuBLASLt has no kernel for it.
Tensor linear_fused(const Tensor& x2, const Tensor& w, const Tensor& bias) {
  const int64_t M = x2.size(0), K = x2.size(1), N = w.size(1);
  Tensor xd = x2.detach().contiguous(), wd = w.detach().contiguous(), bd = bias.detach().contiguous();
  Tensor y = Tensor::empty({M, N}, xd.dtype(), xd.device());  // (M, N)
  {
    NoGradGuard ng;
    if (!cuda::gemm_lt(xd, wd, y, false, false, M, N, K, cuda::LtEpilogue::bias, bd, Tensor(), Tensor()))
      return Tensor();
  }
  const bool gx = x2.requires_grad(), gw = w.requires_grad(), gb = bias.requires_grad();
  attach_grad_fn(y, "linear", {x2, w, bias}, [xd, wd, gx, gw, gb, M, N, K](const Tensor& g_in) {
    NoGradGuard ng;
    Tensor g = contiguous_as(g_in, xd.dtype());  // (M, N)
    Tensor dx, dw, db;
    if (gx) dx = matmul_raw(g, wd, false, true);  // (M, K)
    if (gw || gb) {
      dw = Tensor::empty({K, N}, xd.dtype(), xd.device());
      db = Tensor::empty({N}, xd.dtype(), xd.device());
      if (!cuda::gemm_lt(xd, g, dw, true, false, K, N, M, cuda::LtEpilogue::bgrad_b, Tensor(), Tensor(), db)) {
        dw = matmul_raw(xd, g, true, false);
        db = sum(g, {0});
      }
    }
    return std::vector<Tensor>{dx, gw ? dw : Tensor(), gb ? db : Tensor()};
  });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_defined("linear", {x, w});
  if (w.dim() != 2 || x.size(-1) != w.size(0))
    ST_THROW(ShapeError, "linear: input " << shape_str(x.shape()) << " and weight " << shape_str(w.shape())
                                          << " (expected (C_in, C_out))");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != w.size(1)))
    ST_THROW(ShapeError, "linear: bias " << shape_str(bias.shape()) << " for weight " << shape_str(w.shape()));
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // (M, C_in)
  Tensor y;
  if (bias.defined() && half_cuda(x) && w.dtype() == x.dtype() && bias.dtype() == x.dtype() && w.is_cuda() &&
      bias.is_cuda())
    y = linear_fused(x2, w, bias);
  if (!y.defined()) {
    y = matmul(x2, w);
    if (bias.defined()) y = add(y, bias);
  }
  if (x.dim() != 2) {
    Shape s = x.shape();
    s.back() = w.size(1);
    y = y.reshape(s);
  }
  return y;
}

Tensor linear_nt(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_defined("linear_nt", {x, w});
  if (w.dim() != 2 || x.size(-1) != w.size(1))
    ST_THROW(ShapeError, "linear_nt: input " << shape_str(x.shape()) << " and weight " << shape_str(w.shape())
                                             << " (expected (C_out, C_in))");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != w.size(0)))
    ST_THROW(ShapeError, "linear_nt: bias " << shape_str(bias.shape()) << " for weight " << shape_str(w.shape()));
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // (M, C_in)
  Tensor y = matmul(x2, w, false, true);                       // (M, C_out)
  if (bias.defined()) y = add(y, bias);
  if (x.dim() != 2) {
    Shape s = x.shape();
    s.back() = w.size(0);
    y = y.reshape(s);
  }
  return y;
}

}  // namespace st::ops
