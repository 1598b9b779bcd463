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

uint64_t stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  auto mix = [](uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(mix(seed + 0x9e3779b97f4a7c15ull) ^ h);
}

void fill_normal_keyed(Tensor& t, uint64_t key, float mean, float std, const ElementMap& map) {
  ST_CHECK(map.numel() == t.numel(), ShapeError,
           "keyed fill: the element map covers " << map.numel() << " elements, the tensor has " << t.numel());
  if (t.is_cuda()) return cuda::fill_normal_keyed(t, key, mean, std, map);
  fill_cpu(t, [&](int64_t i) {
    const int64_t j = map.full_index(i);
    return j < 0 ? 0.f : mean + std * philox_normal(key, static_cast<uint64_t>(j));
  });
}

}  // namespace st
