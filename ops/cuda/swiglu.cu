// CUDA SwiGLU on rows of a packed [gate | up]: one grid-stride pass forward (gu → y) and one
// backward (gu, dy → d(gu)), each thread taking a group of a row's columns (a 16-byte pack of
// each half when F is whole packs and every tensor is 16-byte aligned, else one column). The
// arithmetic is ops/cuda/silu.cuh's and the unfused ops': silu rounded to T, the product rounded
// (forward); dy·u rounded to T before silu's gradient, dy·silu (backward), each op rounded alone.
#include "ops/cuda/common.cuh"
#include "ops/cuda/silu.cuh"
#include "ops/swiglu.h"

namespace st::ops::cuda {
namespace {

using st::cuda::load_pack;
using st::cuda::Pack;
using st::cuda::store_pack;

// NP consecutive elements at p in f32: one 16-byte pack (NP = Pack<T>::N), or one element
template <class T, int NP>
__device__ inline void load_n(const T* p, float (&v)[NP]) {
  if constexpr (NP == Pack<T>::N) {
    const Pack<T> q = load_pack(p);
#pragma unroll
    for (int j = 0; j < NP; ++j) v[j] = to_float(q.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < NP; ++j) v[j] = to_float(p[j]);
  }
}

template <class T, int NP>
__device__ inline void store_n(T* p, const float (&v)[NP]) {
  if constexpr (NP == Pack<T>::N) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < NP; ++j) o.v[j] = from_float<T>(v[j]);
    store_pack(p, o);
  } else {
#pragma unroll
    for (int j = 0; j < NP; ++j) p[j] = from_float<T>(v[j]);
  }
}

// kernels

// gu (M, 2F) → y (M, F); a thread per group of NP columns
template <class T, int NP>
__global__ void swiglu_fwd_kernel(const T* gu, T* y, int64_t M, int64_t F) {
  const int64_t per_row = F / NP, n = M * per_row, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t m = i / per_row, f = (i - m * per_row) * NP;
    float g[NP], u[NP], o[NP];
    load_n<T, NP>(gu + m * 2 * F + f, g);
    load_n<T, NP>(gu + m * 2 * F + F + f, u);
#pragma unroll
    for (int j = 0; j < NP; ++j) o[j] = __fmul_rn(to_float(from_float<T>(silu_f32(g[j]))), u[j]);
    store_n<T, NP>(y + m * F + f, o);
  }
}

// gu (M, 2F), dy (M, F) → dgu (M, 2F) (=)
template <class T, int NP>
__global__ void swiglu_bwd_kernel(const T* gu, const T* dy, T* dgu, int64_t M, int64_t F) {
  const int64_t per_row = F / NP, n = M * per_row, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t m = i / per_row, f = (i - m * per_row) * NP;
    float g[NP], u[NP], d[NP], dg[NP], du[NP];
    load_n<T, NP>(gu + m * 2 * F + f, g);
    load_n<T, NP>(gu + m * 2 * F + F + f, u);
    load_n<T, NP>(dy + m * F + f, d);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      du[j] = __fmul_rn(d[j], to_float(from_float<T>(silu_f32(g[j]))));
      dg[j] = silu_grad_f32(g[j], to_float(from_float<T>(__fmul_rn(d[j], u[j]))));
    }
    store_n<T, NP>(dgu + m * 2 * F + f, dg);
    store_n<T, NP>(dgu + m * 2 * F + F + f, du);
  }
}

// Whether the groups can be 16-byte packs: F whole packs, every tensor aligned
template <class T>
bool packed(int64_t F, std::initializer_list<const Tensor*> ts) {
  if (F % Pack<T>::N != 0) return false;
  for (const Tensor* t : ts)
    if (!st::cuda::aligned16(t->data_ptr())) return false;
  return true;
}

}  // namespace

// launchers

void swiglu_fwd(const Tensor& gu, Tensor& y) {
  check_contiguous_cuda("swiglu", {&gu, &y});
  const int64_t M = y.size(0), F = y.size(1);
  if (M * F == 0) return;
  visit_float_dtype(gu.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    constexpr int NP = Pack<T>::N;
    const T* pgu = static_cast<const T*>(gu.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    if (packed<T>(F, {&gu, &y}))
      swiglu_fwd_kernel<T, NP><<<grid_for(M * F / NP, 256), 256, 0, current_stream()>>>(pgu, py, M, F);
    else
      swiglu_fwd_kernel<T, 1><<<grid_for(M * F, 256), 256, 0, current_stream()>>>(pgu, py, M, F);
    CHECK_LAUNCH();
  });
}

void swiglu_bwd(const Tensor& gu, const Tensor& dy, Tensor& dgu) {
  check_contiguous_cuda("swiglu", {&gu, &dy, &dgu});
  const int64_t M = dy.size(0), F = dy.size(1);
  if (M * F == 0) return;
  visit_float_dtype(gu.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    constexpr int NP = Pack<T>::N;
    const T* pgu = static_cast<const T*>(gu.data_ptr());
    const T* pdy = static_cast<const T*>(dy.data_ptr());
    T* pd = static_cast<T*>(dgu.data_ptr());
    if (packed<T>(F, {&gu, &dy, &dgu}))
      swiglu_bwd_kernel<T, NP><<<grid_for(M * F / NP, 256), 256, 0, current_stream()>>>(pgu, pdy, pd, M, F);
    else
      swiglu_bwd_kernel<T, 1><<<grid_for(M * F, 256), 256, 0, current_stream()>>>(pgu, pdy, pd, M, F);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
