#include "ops/softmax.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

Tensor softmax_impl(const Tensor& x_in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(name, {x_in});
  check_floating(name, x_in);
  if (x_in.dim() < 1 || x_in.size(-1) == 0)
    ST_THROW(ShapeError, name << ": needs a non-empty last dim, got " << shape_str(x_in.shape()));
  Tensor x = contiguous_as(x_in, x_in.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  {
    NoGradGuard ng;
    if (x.is_cuda())
      cuda::softmax_fwd(x, y, log);
    else
      cpu::softmax_fwd(x, y, log);
  }
  // backward: y, dy (..., C) → dx (..., C), fresh tensor
  Tensor yd = y.detach();
  attach_grad_fn(y, name, {x_in}, [yd, log](const Tensor& g) {
    Tensor dy = contiguous_as(g, yd.dtype());
    Tensor dx = Tensor::empty(yd.shape(), yd.dtype(), yd.device());
    if (yd.is_cuda())
      cuda::softmax_bwd(yd, dy, dx, log);
    else
      cpu::softmax_bwd(yd, dy, dx, log);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl(x, false); }
Tensor log_softmax(const Tensor& x) { return softmax_impl(x, true); }

}  // namespace st::ops
