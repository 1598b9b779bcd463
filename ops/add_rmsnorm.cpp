#include "ops/add_rmsnorm.h"

#include "ops/check.h"
#include "ops/rmsnorm.h"
#include "tensor/autograd.h"

namespace st::ops {

ResidualNorm add_rmsnorm(const Tensor& x_in, const Tensor& a_in, const Tensor& w_in, float eps) {
  const char* name = "add_rmsnorm";
  check_defined(name, {x_in, w_in});
  const bool has_a = a_in.defined();
  check_same_device(name, {x_in, has_a ? a_in : x_in, w_in});
  check_same_dtype(name, {x_in, has_a ? a_in : x_in, w_in});
  check_floating(name, x_in);
  if (x_in.dim() < 1 || x_in.size(-1) == 0 || (has_a && a_in.shape() != x_in.shape()) ||
      w_in.shape() != Shape{x_in.size(-1)})
    ST_THROW(ShapeError, name << ": x " << shape_str(x_in.shape()) << ", a "
                              << (has_a ? shape_str(a_in.shape()) : std::string("none")) << ", w "
                              << shape_str(w_in.shape()) << " (expected (..., C), x's shape, (C))");
  if (!(eps > 0.f)) ST_THROW(ValueError, name << ": eps must be > 0, got " << eps);
  const int64_t C = x_in.size(-1), N = x_in.numel() / C;
  const DType dt = x_in.dtype();
  const Device dev = x_in.device();
  const bool cuda = dev == Device::cuda;
  Tensor x = contiguous_as(x_in, dt).view({N, C});    // (N, C)
  Tensor w = contiguous_as(w_in, dt);                  // (C)
  Tensor y = Tensor::empty({N, C}, dt, dev);           // (N, C)
  Tensor rstd = Tensor::empty({N}, DType::f32, dev);  // (N)
  Tensor r;                                            // (N, C)
  {
    NoGradGuard ng;
    if (!has_a) {  // r = x: an rmsnorm
      r = x;
      if (cuda)
        cuda::rmsnorm_fwd(x, w, eps, y, rstd);
      else
        cpu::rmsnorm_fwd(x, w, eps, y, rstd);
    } else {
      Tensor a = contiguous_as(a_in, dt).view({N, C});  // (N, C)
      r = Tensor::empty({N, C}, dt, dev);
      if (cuda)
        cuda::add_rmsnorm_fwd(x, a, w, eps, r, y, rstd);
      else
        cpu::add_rmsnorm_fwd(x, a, w, eps, r, y, rstd);
    }
  }
  const Shape shape = x_in.shape();
  ResidualNorm out{r.view(shape).detach(), y.view(shape).detach()};  // tensors of their own, even when r is x
  // backward: dr, dy (..., C), either undefined → dx = da (..., C), dw (C); fresh tensors (=)
  attach_grad_fn({&out.r, &out.y}, name, {x_in, a_in, w_in},
                 [r, w, rstd, has_a, shape, cuda](const std::vector<Tensor>& g) {
                   const Shape rows = r.shape();
                   Tensor dr = g[0].defined() ? contiguous_as(g[0], r.dtype()).view(rows) : Tensor();  // (N, C)
                   Tensor dy = g[1].defined() ? contiguous_as(g[1], r.dtype()).view(rows) : Tensor();  // (N, C)
                   if (!dy.defined()) {  // r only fed the residual: its gradient passes through
                     Tensor dx = dr.view(shape);
                     return std::vector<Tensor>{dx, has_a ? dx : Tensor(), Tensor()};
                   }
                   Tensor dx = r.empty_like(), dw = w.empty_like();
                   if (cuda)
                     cuda::add_rmsnorm_bwd(r, w, rstd, dy, dr, dx, dw);
                   else
                     cpu::add_rmsnorm_bwd(r, w, rstd, dy, dr, dx, dw);
                   Tensor dxs = dx.view(shape);
                   return std::vector<Tensor>{dxs, has_a ? dxs : Tensor(), dw};
                 });
  return out;
}

}  // namespace st::ops
