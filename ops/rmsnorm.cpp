#include "ops/rmsnorm.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor rmsnorm(const Tensor& x_in, const Tensor& w_in, float eps) {
  const char* name = "rmsnorm";
  check_defined(name, {x_in, w_in});
  check_same_device(name, {x_in, w_in});
  check_same_dtype(name, {x_in, w_in});
  check_floating(name, x_in);
  if (x_in.dim() < 1 || x_in.size(-1) == 0 || w_in.shape() != Shape{x_in.size(-1)})
    ST_THROW(ShapeError, name << ": x " << shape_str(x_in.shape()) << ", w " << shape_str(w_in.shape())
                              << " (expected (..., C), (C))");
  if (!(eps > 0.f)) ST_THROW(ValueError, name << ": eps must be > 0, got " << eps);
  const int64_t C = x_in.size(-1), N = x_in.numel() / C;
  const DType dt = x_in.dtype();
  const Device dev = x_in.device();
  Tensor x = contiguous_as(x_in, dt).view({N, C});  // (N, C)
  Tensor w = contiguous_as(w_in, dt);                // (C)
  Tensor y = Tensor::empty({N, C}, dt, dev);         // (N, C)
  Tensor rstd = Tensor::empty({N}, DType::f32, dev);  // (N)
  {
    NoGradGuard ng;
    if (x.is_cuda())
      cuda::rmsnorm_fwd(x, w, eps, y, rstd);
    else
      cpu::rmsnorm_fwd(x, w, eps, y, rstd);
  }
  y = y.view(x_in.shape()).detach();
  // backward: dy (..., C) → dx (..., C), dw (C), fresh tensors (=)
  const Shape xshape = x_in.shape();
  attach_grad_fn(y, name, {x_in, w_in}, [x, w, rstd, xshape](const Tensor& g) {
    Tensor dy = contiguous_as(g, x.dtype()).view(x.shape());  // (N, C)
    Tensor dx = x.empty_like(), dw = w.empty_like();
    if (x.is_cuda())
      cuda::rmsnorm_bwd(x, w, rstd, dy, dx, dw);
    else
      cpu::rmsnorm_bwd(x, w, rstd, dy, dx, dw);
    return std::vector<Tensor>{dx.view(xshape), dw};
  });
  return y;
}

}  // namespace st::ops
