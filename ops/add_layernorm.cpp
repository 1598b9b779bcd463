#include "ops/add_layernorm.h"

#include "ops/check.h"
#include "ops/layernorm.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

ResidualNorm residual_norm(const Tensor& x_in, const Tensor& a_in, const ResidualDropout& d, const Tensor& w_in,
                           const Tensor& b_in, float eps) {
  const char* name = "add_layernorm";
  check_defined(name, {x_in, w_in, b_in});
  const bool has_a = a_in.defined();
  check_same_device(name, {x_in, has_a ? a_in : x_in, w_in, b_in});
  check_same_dtype(name, {x_in, has_a ? a_in : x_in, w_in, b_in});
  check_floating(name, x_in);
  if (x_in.dim() < 1 || x_in.size(-1) == 0 || (has_a && a_in.shape() != x_in.shape()) ||
      w_in.shape() != Shape{x_in.size(-1)} || b_in.shape() != w_in.shape())
    ST_THROW(ShapeError, name << ": x " << shape_str(x_in.shape()) << ", a "
                              << (has_a ? shape_str(a_in.shape()) : std::string("none")) << ", w "
                              << shape_str(w_in.shape()) << ", b " << shape_str(b_in.shape())
                              << " (expected (..., C), x's shape, (C), (C))");
  if (!(eps > 0.f)) ST_THROW(ValueError, name << ": eps must be > 0, got " << eps);
  const int64_t C = x_in.size(-1), N = x_in.numel() / C;
  const DType dt = x_in.dtype();
  const Device dev = x_in.device();
  const bool cuda = dev == Device::cuda;
  Tensor x = contiguous_as(x_in, dt).view({N, C});                  // (N, C)
  Tensor w = contiguous_as(w_in, dt), b = contiguous_as(b_in, dt);  // (C)
  Tensor y = Tensor::empty({N, C}, dt, dev);                        // (N, C)
  Tensor mean = Tensor::empty({N}, DType::f32, dev), rstd = Tensor::empty({N}, DType::f32, dev);  // (N)
  Tensor r;                                                                                       // (N, C)
  {
    NoGradGuard ng;
    if (!has_a) {  // r = x: a layernorm
      r = x;
      if (cuda)
        cuda::layernorm_fwd(x, w, b, eps, y, mean, rstd);
      else
        cpu::layernorm_fwd(x, w, b, eps, y, mean, rstd);
    } else {
      Tensor a = contiguous_as(a_in, dt).view({N, C});  // (N, C)
      r = Tensor::empty({N, C}, dt, dev);
      if (cuda)
        cuda::add_layernorm_fwd(x, a, d, w, b, eps, r, y, mean, rstd);
      else
        cpu::add_layernorm_fwd(x, a, d, w, b, eps, r, y, mean, rstd);
    }
  }
  const Shape shape = x_in.shape();
  ResidualNorm out{r.view(shape).detach(), y.view(shape).detach()};  // tensors of their own, even when r is x
  // backward: dr, dy (..., C), either undefined → dx, da (..., C), dw, db (C); fresh tensors (=)
  attach_grad_fn({&out.r, &out.y}, name, {x_in, a_in, w_in, b_in},
                 [r, w, mean, rstd, d, has_a, shape, cuda](const std::vector<Tensor>& g) {
                   const Shape rows = r.shape();
                   Tensor dr = g[0].defined() ? contiguous_as(g[0], r.dtype()).view(rows) : Tensor();  // (N, C)
                   Tensor dy = g[1].defined() ? contiguous_as(g[1], r.dtype()).view(rows) : Tensor();  // (N, C)
                   const bool drop = has_a && d.p > 0.f;
                   if (!dy.defined() && !drop) {  // r only fed the residual: its gradient passes through
                     Tensor dx = dr.view(shape);
                     return std::vector<Tensor>{dx, has_a ? dx : Tensor(), Tensor(), Tensor()};
                   }
                   Tensor dx = r.empty_like(), da = drop ? r.empty_like() : Tensor();
                   Tensor dw = dy.defined() ? w.empty_like() : Tensor(), db = dy.defined() ? w.empty_like() : Tensor();
                   if (cuda)
                     cuda::add_layernorm_bwd(r, w, mean, rstd, dy, dr, d, dx, da, dw, db);
                   else
                     cpu::add_layernorm_bwd(r, w, mean, rstd, dy, dr, d, dx, da, dw, db);
                   Tensor dxs = dx.view(shape);
                   return std::vector<Tensor>{dxs, has_a ? (drop ? da.view(shape) : dxs) : Tensor(), dw, db};
                 });
  return out;
}

void check_p(float p, const Tensor& a) {
  if (!(p >= 0.f && p <= 1.f))
    ST_THROW(ValueError, "add_layernorm: dropout p must lie in [0, 1], got " << p << " for " << a.describe());
}

}  // namespace

ResidualNorm add_layernorm(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, float eps) {
  return residual_norm(x, a, ResidualDropout{}, w, b, eps);
}

ResidualNorm dropout_add_layernorm(const Tensor& x, const Tensor& a, float p, uint64_t seed, uint64_t offset,
                                   bool training, const Tensor& w, const Tensor& b, float eps) {
  check_defined("add_layernorm", {a});
  check_p(p, a);
  if (!training || p == 0.f) return residual_norm(x, a, ResidualDropout{}, w, b, eps);
  return residual_norm(x, a, ResidualDropout{p, seed, offset, Tensor()}, w, b, eps);
}

ResidualNorm dropout_add_layernorm(const Tensor& x, const Tensor& a, float p, const Tensor& seed, uint64_t offset,
                                   bool training, const Tensor& w, const Tensor& b, float eps) {
  check_defined("add_layernorm", {a, seed});
  check_p(p, a);
  ST_CHECK(seed.dtype() == DType::i64 && seed.numel() == 1 && seed.device() == x.device() && seed.is_contiguous(),
           ValueError,
           "add_layernorm: the dropout seed must be one i64 element on " << device_name(x.device()) << ", got "
                                                                         << seed.describe());
  if (!training || p == 0.f) return residual_norm(x, a, ResidualDropout{}, w, b, eps);
  return residual_norm(x, a, ResidualDropout{p, 0, offset, seed}, w, b, eps);
}

}  // namespace st::ops
