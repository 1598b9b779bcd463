#include "tensor/rng.h"

#include <cmath>

#include "tensor/philox.h"

namespace st {
namespace {
template <class F>
void fill_cpu(Tensor& t, F&& value_at) {
  if (!is_floating(t.dtype())) ST_THROW(DTypeError, "random fill: tensor is " << dtype_name(t.dtype()));
  if (!t.is_contiguous()) ST_THROW(ShapeError, "random fill: tensor must be contiguous");
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = t.data<T>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) d[i] = store_from_double<T>(value_at(i));
  });
}
}  // namespace

void fill_uniform(Tensor& t, Generator& gen, float lo, float hi) {
  uint64_t seed = gen.seed(), off = gen.advance(static_cast<uint64_t>(t.numel()));
  if (t.is_cuda()) return cuda::fill_uniform(t, seed, off, lo, hi);
  fill_cpu(t, [&](int64_t i) { return lo + (hi - lo) * philox_uniform(seed, off + i); });
}

void fill_normal(Tensor& t, Generator& gen, float mean, float std) {
  uint64_t seed = gen.seed(), off = gen.advance(static_cast<uint64_t>(t.numel()));
  if (t.is_cuda()) return cuda::fill_normal(t, seed, off, mean, std);
  fill_cpu(t, [&](int64_t i) { return mean + std * philox_normal(seed, off + i); });
}

}  // namespace st
