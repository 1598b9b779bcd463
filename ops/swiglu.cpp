#include "ops/swiglu.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor swiglu(const Tensor& gu_in) {
  const char* name = "swiglu";
  check_defined(name, {gu_in});
  check_floating(name, gu_in);
  if (gu_in.dim() < 1 || gu_in.size(-1) == 0 || gu_in.size(-1) % 2 != 0)
    ST_THROW(ShapeError, name << ": gu " << shape_str(gu_in.shape())
                              << " (expected (..., 2F), F ≥ 1: [gate | up] along the last dim)");
  const int64_t F = gu_in.size(-1) / 2, M = gu_in.numel() / (2 * F);
  const DType dt = gu_in.dtype();
  const Device dev = gu_in.device();
  Tensor gu = contiguous_as(gu_in, dt).view({M, 2 * F});  // (M, 2F)
  Tensor y = Tensor::empty({M, F}, dt, dev);              // (M, F)
  {
    NoGradGuard ng;
    if (gu.is_cuda())
      cuda::swiglu_fwd(gu, y);
    else
      cpu::swiglu_fwd(gu, y);
  }
  Shape yshape = gu_in.shape();
  yshape.back() = F;
  y = y.view(yshape).detach();
  // backward: dy (..., F) → d(gu) (..., 2F), a fresh tensor (=)
  const Shape gshape = gu_in.shape();
  attach_grad_fn(y, name, {gu_in}, [gu, gshape](const Tensor& g) {
    const int64_t M = gu.size(0), F = gu.size(1) / 2;
    Tensor dy = contiguous_as(g, gu.dtype()).view({M, F});  // (M, F)
    Tensor dgu = gu.empty_like();                           // (M, 2F)
    if (gu.is_cuda())
      cuda::swiglu_bwd(gu, dy, dgu);
    else
      cpu::swiglu_bwd(gu, dy, dgu);
    return std::vector<Tensor>{dgu.view(gshape)};
  });
  return y;
}

}  // namespace st::ops
