// CUDA inverted dropout: element i is dropped iff philox_uniform_lane(seed, offset + i) < p, as
// on the CPU (ops/cpu/dropout.cpp), so masks agree bit for bit across devices. One thread per
// Philox block: stream positions 4b … 4b + 3 (elements 4b − offset … of x) take its four lanes,
// so each evaluation of the ten rounds serves four elements. The mask is never stored; the
// backward is this same kernel applied to dy (the entry point arranges that).
#include "ops/cuda/common.cuh"
#include "ops/dropout.h"
#include "tensor/philox.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;

// x, y (n): y = x·mask/(1 − p); the seed is `seed_ptr`'s value when given (a graph-captured
// step's seed table), else `seed`. Blocks first … last of the stream cover offset … offset + n − 1.
template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, uint64_t seed,
                               const uint64_t* seed_ptr, uint64_t offset, float p, float scale) {
  if (seed_ptr) seed = *seed_ptr;
  const uint64_t first = offset >> 2, count = ((offset + static_cast<uint64_t>(n) - 1) >> 2) - first + 1;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; t < count; t += stride) {
    const uint64_t b = first + t;
    const PhiloxBlock r = philox4x32_10(seed, b);
    const int64_t i0 = static_cast<int64_t>(4 * b) - static_cast<int64_t>(offset);  // element of lane 0
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int64_t i = i0 + l;
      if (i < 0 || i >= n) continue;
      const float u = static_cast<float>(r.x[l] >> 8) * (1.0f / 16777216.0f);
      y[i] = from_float<T>(u < p ? 0.f : to_float(x[i]) * scale);
    }
  }
}

void launch(const Tensor& x, float p, uint64_t seed, const uint64_t* seed_ptr, uint64_t offset, Tensor& y) {
  check_contiguous_cuda("dropout", {&x, &y});
  const int64_t n = x.numel();
  if (n == 0) return;
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const int64_t blocks = static_cast<int64_t>(((offset + static_cast<uint64_t>(n) - 1) >> 2) - (offset >> 2) + 1);
  visit_float_dtype(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(blocks, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), n, seed, seed_ptr, offset, p, scale);
    CHECK_LAUNCH();
  });
}

}  // namespace

// launchers

// x (n) → y (n), contiguous, one dtype
void dropout_fwd(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  launch(x, p, seed, nullptr, offset, y);
}

void dropout_fwd_seed_at(const Tensor& x, float p, const uint64_t* seed, uint64_t offset, Tensor& y) {
  launch(x, p, 0, seed, offset, y);
}

}  // namespace st::ops::cuda
