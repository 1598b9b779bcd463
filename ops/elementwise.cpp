#include "ops/elementwise.h"

#include "ops/check.h"
#include "ops/reduce.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "?";
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_same_device(name, {a, b});
  check_same_dtype(name, {a, b});
  check_floating(name, a);
  Shape shape = broadcast_shape(name, a.shape(), b.shape());
  NoGradGuard ng;
  Tensor ae = expand(a, shape), be = expand(b, shape);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (a.is_cuda())
    cuda::binary_fwd(op, ae, be, out);
  else
    cpu::binary_fwd(op, ae, be, out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::add, a, b);
  Shape sa = a.shape(), sb = b.shape();
  attach_grad_fn(out, "add", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(g, sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::sub, a, b);
  Shape sa = a.shape(), sb = b.shape();
  attach_grad_fn(out, "sub", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(scale(g, -1.0), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::mul, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  attach_grad_fn(out, "mul", {a, b}, [ad, bd, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to_shape(mul(g, bd), ad.shape()) : Tensor(),
                               gb ? sum_to_shape(mul(g, ad), bd.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::div, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor bd = b.detach(), od = out.detach();
  Shape sa = a.shape();
  attach_grad_fn(out, "div", {a, b}, [bd, od, sa, ga, gb](const Tensor& g) {
    Tensor ga_full = div(g, bd);  // ∂/∂a = g / b ; ∂/∂b = -g·a/b² = -(g/b)·out
    return std::vector<Tensor>{ga ? sum_to_shape(ga_full, sa) : Tensor(),
                               gb ? sum_to_shape(scale(mul(ga_full, od), -1.0), bd.shape()) : Tensor()};
  });
  return out;
}

Tensor scale(const Tensor& x, double s) {
  check_defined("scale", {x});
  check_floating("scale", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  {
    NoGradGuard ng;
    Tensor xc = x.contiguous();
    if (x.is_cuda())
      cuda::scale_fwd(xc, s, out);
    else
      cpu::scale_fwd(xc, s, out);
  }
  attach_grad_fn(out, "scale", {x}, [s](const Tensor& g) { return std::vector<Tensor>{scale(g, s)}; });
  return out;
}

}  // namespace st::ops
