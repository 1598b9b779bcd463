// Philox fills on the GPU. Element i of a draw at `offset` uses counter (offset + i), exactly as
// tensor/rng.cpp does on the CPU; the affine map is written with _rn intrinsics so that nvcc
// cannot contract it into an FMA the CPU does not do (uniform fills are then bit-identical).
#include "tensor/cuda/dtype_cuda.cuh"
#include "tensor/cuda/runtime.h"
#include "tensor/philox.h"
#include "tensor/rng.h"

namespace st::cuda {
namespace {

constexpr int kThreads = 256;

// kernels

template <class T>
__global__ void fill_uniform_kernel(T* d, int64_t n, uint64_t seed, uint64_t offset, float lo, float hi) {
  const float span = __fsub_rn(hi, lo);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    d[i] = from_float<T>(__fadd_rn(lo, __fmul_rn(span, philox_uniform(seed, offset + i))));
}

template <class T>
__global__ void fill_normal_kernel(T* d, int64_t n, uint64_t seed, uint64_t offset, float mean, float std) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    d[i] = from_float<T>(__fadd_rn(mean, __fmul_rn(std, philox_normal(seed, offset + i))));
}

template <class T>
__global__ void fill_normal_keyed_kernel(T* d, int64_t n, uint64_t key, float mean, float std, ElementMap map) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = map.full_index(i);
    d[i] = from_float<T>(j < 0 ? 0.f : __fadd_rn(mean, __fmul_rn(std, philox_normal(key, static_cast<uint64_t>(j)))));
  }
}

// launchers

void check(const Tensor& t) {
  if (!t.is_contiguous()) ST_THROW(ShapeError, "random fill: tensor must be contiguous");
}

}  // namespace

void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float lo, float hi) {
  check(t);
  const int64_t n = t.numel();
  if (n == 0) return;
  visit_float_dtype(t.dtype(), "random fill", [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<T*>(t.data_ptr()), n,
                                                                                     seed, offset, lo, hi);
    CHECK_LAUNCH();
  });
}

void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std) {
  check(t);
  const int64_t n = t.numel();
  if (n == 0) return;
  visit_float_dtype(t.dtype(), "random fill", [&](auto tag) {
    using T = decltype(tag);
    fill_normal_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<T*>(t.data_ptr()), n,
                                                                                    seed, offset, mean, std);
    CHECK_LAUNCH();
  });
}

void fill_normal_keyed(Tensor& t, uint64_t key, float mean, float std, const ElementMap& map) {
  check(t);
  const int64_t n = t.numel();
  if (n == 0) return;
  visit_float_dtype(t.dtype(), "random fill", [&](auto tag) {
    using T = decltype(tag);
    fill_normal_keyed_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(t.data_ptr()), n, key, mean, std, map);
    CHECK_LAUNCH();
  });
}

}  // namespace st::cuda
