// CUDA softmax / log-softmax over the last dim: one block per row (R, C); max, Σ exp(x − max) in
// f32, then one pass to write. The row is read in its own dtype (no f32 copy). Backward row sums
// (Σ dy·y, Σ dy) are block reductions; dx is written fresh (=).
#include "ops/cuda/common.cuh"
#include "ops/softmax.h"

namespace st::ops::cuda {
namespace {

// kernels

// x, y (R, C)
template <class T>
__global__ void softmax_fwd_kernel(const T* x, T* y, int64_t R, int64_t C, bool log) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, to_float(xr[c]));
    mx = block_max(mx, scratch);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += expf(to_float(xr[c]) - mx);
    s = block_sum(s, scratch);
    if (log) {
      const float ls = logf(s);
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_float<T>((to_float(xr[c]) - mx) - ls);
    } else {
      const float inv = 1.f / s;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_float<T>(expf(to_float(xr[c]) - mx) * inv);
    }
  }
}

// y, dy, dx (R, C)
template <class T>
__global__ void softmax_bwd_kernel(const T* y, const T* dy, T* dx, int64_t R, int64_t C, bool log) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      s += log ? to_float(gr[c]) : to_float(gr[c]) * to_float(yr[c]);
    s = block_sum(s, scratch);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float yv = to_float(yr[c]), g = to_float(gr[c]);
      dr[c] = from_float<T>(log ? g - expf(yv) * s : yv * (g - s));
    }
  }
}

int threads_for(int64_t C) { return C >= 2048 ? 512 : C >= 256 ? 256 : 64; }

}  // namespace

// launchers

void softmax_fwd(const Tensor& x, Tensor& y, bool log) {
  check_contiguous_cuda("softmax", {&x, &y});
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  if (R == 0 || C == 0) return;
  visit_float_dtype(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_fwd_kernel<T><<<grid_for(R, 1), threads_for(C), 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), R, C, log);
    CHECK_LAUNCH();
  });
}

void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  check_contiguous_cuda("softmax", {&y, &dy, &dx});
  const int64_t C = y.size(-1), R = C ? y.numel() / C : 0;
  if (R == 0 || C == 0) return;
  visit_float_dtype(y.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_bwd_kernel<T><<<grid_for(R, 1), threads_for(C), 0, current_stream()>>>(
        static_cast<const T*>(y.data_ptr()), static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()), R,
        C, log);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
