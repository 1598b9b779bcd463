#include "ops/dropout.h"

#include <cmath>

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {
Tensor apply_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  NoGradGuard ng;
  if (x.is_cuda())
    cuda::dropout_fwd(x, p, seed, offset, y);
  else
    cpu::dropout_fwd(x, p, seed, offset, y);
  return y;
}
// the same, the seed read from `seed` (one i64 element on x's device) when the mask is made
Tensor apply_mask_at(const Tensor& x, float p, const Tensor& seed, uint64_t offset) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  NoGradGuard ng;
  if (x.is_cuda())
    cuda::dropout_fwd_seed_at(x, p, static_cast<const uint64_t*>(seed.data_ptr()), offset, y);
  else
    cpu::dropout_fwd(x, p, static_cast<uint64_t>(*seed.data<int64_t>()), offset, y);
  return y;
}
}  // namespace

Tensor dropout(const Tensor& x_in, float p, Generator& gen, bool training) {
  if (!training || p == 0.f || x_in.numel() == 0) return dropout(x_in, p, gen.seed(), 0, training);
  const uint64_t offset = gen.advance(static_cast<uint64_t>(x_in.numel()));
  return dropout(x_in, p, gen.seed(), offset, training);
}

Tensor dropout(const Tensor& x_in, float p, uint64_t seed, uint64_t offset, bool training) {
  check_defined("dropout", {x_in});
  check_floating("dropout", x_in);
  if (!(p >= 0.f && p <= 1.f)) ST_THROW(ValueError, "dropout: p must lie in [0, 1], got " << p << " for " << x_in.describe());
  if (!training || p == 0.f || x_in.numel() == 0) return x_in;
  Tensor x = contiguous_as(x_in, x_in.dtype());
  Tensor y = apply_mask(x, p, seed, offset);
  // backward: dy (...) → dx (...) = mask·dy/(1 − p), the mask regenerated from (seed, offset)
  DType dt = x.dtype();
  attach_grad_fn(y, "dropout", {x_in}, [p, seed, offset, dt](const Tensor& g) {
    return std::vector<Tensor>{apply_mask(contiguous_as(g, dt), p, seed, offset)};
  });
  return y;
}

Tensor dropout(const Tensor& x_in, float p, const Tensor& seed, uint64_t offset, bool training) {
  check_defined("dropout", {x_in, seed});
  check_floating("dropout", x_in);
  if (!(p >= 0.f && p <= 1.f)) ST_THROW(ValueError, "dropout: p must lie in [0, 1], got " << p << " for " << x_in.describe());
  ST_CHECK(seed.dtype() == DType::i64 && seed.numel() == 1 && seed.device() == x_in.device(), ValueError,
           "dropout: the seed must be one i64 element on " << device_name(x_in.device()) << ", got "
                                                           << seed.describe());
  if (!training || p == 0.f || x_in.numel() == 0) return x_in;
  Tensor x = contiguous_as(x_in, x_in.dtype());
  Tensor y = apply_mask_at(x, p, seed, offset);
  DType dt = x.dtype();
  attach_grad_fn(y, "dropout", {x_in}, [p, seed, offset, dt](const Tensor& g) {
    return std::vector<Tensor>{apply_mask_at(contiguous_as(g, dt), p, seed, offset)};
  });
  return y;
}

}  // namespace st::ops
