// CUDA inverted dropout: element i is dropped iff philox_uniform(seed, offset + i) < p, as on the
// CPU (ops/cpu/dropout.cpp), so masks agree bit for bit across devices. The mask is never
// stored; the backward is this same kernel applied to dy (the entry point arranges that).
#include "ops/cuda/pointwise.cuh"
#include "ops/dropout.h"
#include "tensor/philox.h"

namespace st::ops::cuda {
namespace {

// kernels (functor run inside map1_kernel)

struct DropoutF {
  uint64_t seed, offset;
  float p, scale;
  __device__ float operator()(int64_t i, float v) const {
    return philox_uniform(seed, offset + static_cast<uint64_t>(i)) < p ? 0.f : v * scale;
  }
};

// the same with the seed read from device memory (a graph-captured step's seed table)
struct DropoutSeedAtF {
  const uint64_t* seed;
  uint64_t offset;
  float p, scale;
  __device__ float operator()(int64_t i, float v) const {
    return philox_uniform(*seed, offset + static_cast<uint64_t>(i)) < p ? 0.f : v * scale;
  }
};

}  // namespace

// launchers

// x (n) → y (n), contiguous, one dtype
void dropout_fwd(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  check_contiguous_cuda("dropout", {&x, &y});
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  visit_float_dtype(x.dtype(), "dropout", [&](auto tag) { map1<decltype(tag)>(x, y, DropoutF{seed, offset, p, scale}); });
}

void dropout_fwd_seed_at(const Tensor& x, float p, const uint64_t* seed, uint64_t offset, Tensor& y) {
  check_contiguous_cuda("dropout", {&x, &y});
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  visit_float_dtype(x.dtype(), "dropout",
                    [&](auto tag) { map1<decltype(tag)>(x, y, DropoutSeedAtF{seed, offset, p, scale}); });
}

}  // namespace st::ops::cuda
