// CUDA elementwise arithmetic: out = a ∘ b on broadcast (stride-0) views, and out = s·x.
// Computed in f32, rounded once on store, like ops/cpu/elementwise.cpp. Contiguous operands
// take a vectorised path (16-byte loads and stores); broadcast views a strided one.
#include "ops/cuda/common.cuh"
#include "ops/elementwise.h"
#include "tensor/cuda/strided.cuh"

namespace st::ops::cuda {
namespace {

using st::cuda::load_pack;
using st::cuda::Pack;
using st::cuda::store_pack;
constexpr int kThreads = 256;

struct AddF { __device__ float operator()(float x, float y) const { return x + y; } };
struct SubF { __device__ float operator()(float x, float y) const { return x - y; } };
struct MulF { __device__ float operator()(float x, float y) const { return x * y; } };
struct DivF { __device__ float operator()(float x, float y) const { return x / y; } };

// kernels

// a, b, out (n) contiguous, 16-byte aligned; the tail past the last full pack is done scalar.
template <class T, class F>
__global__ void binary_vec_kernel(const T* a, const T* b, T* out, int64_t n, F f) {
  constexpr int N = Pack<T>::N;
  const int64_t packs = n / N;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < packs; p += stride) {
    Pack<T> x = load_pack(a + p * N), y = load_pack(b + p * N), r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = from_float<T>(f(to_float(x.v[j]), to_float(y.v[j])));
    store_pack(out + p * N, r);
  }
  for (int64_t i = packs * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
}

// a, b: any strides (broadcast views) over out's shape; out (n) contiguous.
template <class T, class F>
__global__ void binary_strided_kernel(const T* a, const T* b, T* out, st::cuda::Strided2 st, int64_t n, F f) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t oa, ob;
    st.offsets(i, oa, ob);
    out[i] = from_float<T>(f(to_float(a[oa]), to_float(b[ob])));
  }
}

// x, out (n) contiguous
template <class T>
__global__ void scale_kernel(const T* x, T* out, int64_t n, float s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_float<T>(s * to_float(x[i]));
}

// launchers

template <class T, class F>
void binary_launch(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  if (a.is_contiguous() && b.is_contiguous() && st::cuda::aligned16(pa) && st::cuda::aligned16(pb) &&
      st::cuda::aligned16(po)) {
    binary_vec_kernel<T><<<grid_for(n / Pack<T>::N + 1, kThreads), kThreads, 0, stream>>>(pa, pb, po, n, f);
  } else {
    auto st = st::cuda::make_strided2(out.shape(), a.strides(), b.strides(), "elementwise");
    binary_strided_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, po, st, n, f);
  }
  CHECK_LAUNCH();
}

}  // namespace

void binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  check_contiguous_cuda("elementwise", {&out});
  if (!a.is_cuda() || !b.is_cuda()) ST_THROW(DeviceError, "elementwise: CUDA kernel got a host operand");
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype())
    ST_THROW(DTypeError, "elementwise: " << a.describe() << " ∘ " << b.describe() << " → " << out.describe());
  visit_float_dtype(out.dtype(), "elementwise", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add: binary_launch<T>(a, b, out, AddF{}); break;
      case BinaryOp::sub: binary_launch<T>(a, b, out, SubF{}); break;
      case BinaryOp::mul: binary_launch<T>(a, b, out, MulF{}); break;
      case BinaryOp::div: binary_launch<T>(a, b, out, DivF{}); break;
    }
  });
}

void scale_fwd(const Tensor& x, double s, Tensor& out) {
  check_contiguous_cuda("scale", {&x, &out});
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_float_dtype(out.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), n, static_cast<float>(s));
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
