// Pointwise map over contiguous tensors of one dtype: out[i] = f(i, in0[i] [, in1[i]]), computed in
// f32. When every pointer is 16-byte aligned each thread moves whole 16-byte packs (8 halves or
// 4 floats per load); the tail is done element by element. Used by activations, dropout, scale.
#pragma once
#include "ops/cuda/common.cuh"

namespace st::ops::cuda {

using st::cuda::load_pack;
using st::cuda::Pack;
using st::cuda::store_pack;

// kernels

template <class T, class F>
__global__ void map1_kernel(const T* a, T* out, int64_t n, bool vec, F f) {
  constexpr int N = Pack<T>::N;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / N;
    for (int64_t p = t0; p < packs; p += stride) {
      Pack<T> x = load_pack(a + p * N), r;
#pragma unroll
      for (int j = 0; j < N; ++j) r.v[j] = from_float<T>(f(p * N + j, to_float(x.v[j])));
      store_pack(out + p * N, r);
    }
    done = packs * N;
  }
  for (int64_t i = done + t0; i < n; i += stride) out[i] = from_float<T>(f(i, to_float(a[i])));
}

template <class T, class F>
__global__ void map2_kernel(const T* a, const T* b, T* out, int64_t n, bool vec, F f) {
  constexpr int N = Pack<T>::N;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / N;
    for (int64_t p = t0; p < packs; p += stride) {
      Pack<T> x = load_pack(a + p * N), y = load_pack(b + p * N), r;
#pragma unroll
      for (int j = 0; j < N; ++j) r.v[j] = from_float<T>(f(p * N + j, to_float(x.v[j]), to_float(y.v[j])));
      store_pack(out + p * N, r);
    }
    done = packs * N;
  }
  for (int64_t i = done + t0; i < n; i += stride) out[i] = from_float<T>(f(i, to_float(a[i]), to_float(b[i])));
}

// launchers

template <class T, class F>
void map1(const Tensor& a, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  bool vec = st::cuda::aligned16(pa) && st::cuda::aligned16(po);
  map1_kernel<T><<<grid_for(n / Pack<T>::N + 1, 256), 256, 0, current_stream()>>>(pa, po, n, vec, f);
  CHECK_LAUNCH();
}

template <class T, class F>
void map2(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  bool vec = st::cuda::aligned16(pa) && st::cuda::aligned16(pb) && st::cuda::aligned16(po);
  map2_kernel<T><<<grid_for(n / Pack<T>::N + 1, 256), 256, 0, current_stream()>>>(pa, pb, po, n, vec, f);
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda
