#include "ops/layernorm.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor layernorm(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, float eps) {
  const char* name = "layernorm";
  check_same_device(name, {x_in, w_in, b_in});
  check_same_dtype(name, {x_in, w_in, b_in});
  check_floating(name, x_in);
  if (x_in.dim() < 1 || x_in.size(-1) == 0 || w_in.shape() != Shape{x_in.size(-1)} || b_in.shape() != w_in.shape())
    ST_THROW(ShapeError, name << ": x " << shape_str(x_in.shape()) << ", w " << shape_str(w_in.shape()) << ", b "
                              << shape_str(b_in.shape()) << " (expected (..., C), (C), (C))");
  if (!(eps > 0.f)) ST_THROW(ValueError, name << ": eps must be > 0, got " << eps);
  const int64_t C = x_in.size(-1), N = x_in.numel() / C;
  const DType dt = x_in.dtype();
  const Device dev = x_in.device();
  Tensor x = contiguous_as(x_in, dt).view({N, C});  // (N, C)
  Tensor w = contiguous_as(w_in, dt), b = contiguous_as(b_in, dt);  // (C)
  Tensor y = Tensor::empty({N, C}, dt, dev);                       // (N, C)
  Tensor mean = Tensor::empty({N}, DType::f32, dev), rstd = Tensor::empty({N}, DType::f32, dev);  // (N)
  {
    NoGradGuard ng;
    if (x.is_cuda())
      cuda::layernorm_fwd(x, w, b, eps, y, mean, rstd);
    else
      cpu::layernorm_fwd(x, w, b, eps, y, mean, rstd);
  }
  y = y.view(x_in.shape()).detach();
  // backward: dy (..., C) → dx (..., C), dw (C), db (C), fresh tensors
  Shape xshape = x_in.shape();
  attach_grad_fn(y, name, {x_in, w_in, b_in}, [x, w, mean, rstd, xshape](const Tensor& g) {
    Tensor dy = contiguous_as(g, x.dtype()).view(x.shape());
    Tensor dx = x.empty_like(), dw = w.empty_like(), db = w.empty_like();
    if (x.is_cuda())
      cuda::layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db);
    else
      cpu::layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db);
    return std::vector<Tensor>{dx.view(xshape), dw, db};
  });
  return y;
}

}  // namespace st::ops
