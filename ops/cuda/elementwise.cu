// CUDA elementwise arithmetic: out = a ∘ b on broadcast (stride-0) views, and out = s·x.
// Computed in f32, rounded once on store, like ops/cpu/elementwise.cpp. Three paths:
//   - same shape, both contiguous: the pointwise map (16-byte packs when aligned, else scalar);
//   - one operand contiguous over out (M, N), the other a contiguous (N) broadcast over the
//     leading dims (the bias add): threads of a warp take adjacent columns, the broadcast
//     operand's pack is loaded once per thread and reused down its rows; 16-byte packs when every
//     pointer is aligned and N allows, scalar otherwise;
//   - anything else: a strided kernel over general broadcast views.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"
#include "ops/elementwise.h"
#include "tensor/cuda/strided.cuh"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTargetBlocks = 2048;  // row-broadcast grid: ~16 blocks per SM on an H200

struct AddF { __device__ float operator()(float x, float y) const { return x + y; } };
struct SubF { __device__ float operator()(float x, float y) const { return x - y; } };
struct MulF { __device__ float operator()(float x, float y) const { return x * y; } };
struct DivF { __device__ float operator()(float x, float y) const { return x / y; } };

// f with its operands swapped: lets the "a broadcast, b full" case reuse the "a full" kernel.
template <class F>
struct Swapped {
  F f;
  __device__ float operator()(float x, float y) const { return f(y, x); }
};
// f as a pointwise-map functor (which also passes the element index)
template <class F>
struct Indexed {
  F f;
  __device__ float operator()(int64_t, float x, float y) const { return f(x, y); }
};

// kernels

// a, out (M, N) contiguous; b (N) broadcast over the rows: out[r][c] = f(a[r][c], b[c]).
// 2-d block: threadIdx.x a pack of V adjacent columns, threadIdx.y a row lane; blocks stride
// over rows. V > 1 needs a, b, out 16-byte aligned and N % V == 0.
template <class T, int V, class F>
__global__ void binary_rowbcast_kernel(const T* a, const T* b, T* out, int64_t M, int64_t N, F f) {
  using st::cuda::load_pack;
  using st::cuda::Pack;
  const int64_t c0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V;
  if (c0 >= N) return;
  const int64_t rstep = (int64_t)gridDim.y * blockDim.y;
  if constexpr (V > 1) {
    static_assert(V == Pack<T>::N, "vector width is one 16-byte pack");
    const Pack<T> y = load_pack(b + c0);
    float yf[V];
#pragma unroll
    for (int j = 0; j < V; ++j) yf[j] = to_float(y.v[j]);
#pragma unroll 2
    for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < M; r += rstep) {
      const Pack<T> x = load_pack(a + r * N + c0);
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = from_float<T>(f(to_float(x.v[j]), yf[j]));
      st::cuda::store_pack(out + r * N + c0, o);
    }
  } else {
    const float yf = to_float(b[c0]);
    for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < M; r += rstep)
      out[r * N + c0] = from_float<T>(f(to_float(a[r * N + c0]), yf));
  }
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

// launchers

// Length N of the trailing block of dims over which a view of `shape` is contiguous (strides
// 1, shape[-1], ...; size-1 dims skipped), provided every dim before it has stride 0 (or size
// 1); 0 when the view is not of that form. N == numel means a fully contiguous view.
int64_t rowbcast_len(const Shape& shape, const Shape& strides) {
  int64_t expect = 1;
  int64_t d = static_cast<int64_t>(shape.size()) - 1;
  for (; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] != expect) break;
    expect *= shape[d];
  }
  for (; d >= 0; --d)
    if (shape[d] != 1 && strides[d] != 0) return 0;
  return expect;
}

// a, out (M, N) contiguous, b (N) broadcast over the rows
template <class T, class F>
void rowbcast_launch(const T* a, const T* b, T* out, int64_t M, int64_t N, F f) {
  constexpr int VP = st::cuda::Pack<T>::N;
  const bool vec = N % VP == 0 && st::cuda::aligned16(a) && st::cuda::aligned16(b) && st::cuda::aligned16(out);
  const int64_t packs = vec ? N / VP : N;
  int bx = 32;  // column packs per block; fewer for narrow rows so that threads are not idle
  while (bx > 1 && bx / 2 >= packs) bx /= 2;
  const int by = kThreads / bx;
  const int64_t gx = (packs + bx - 1) / bx;
  int64_t gy = std::min<int64_t>((M + by - 1) / by, std::max<int64_t>(1, kTargetBlocks / gx));
  gy = std::min<int64_t>(gy, 65535);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block(bx, by);
  if (vec)
    binary_rowbcast_kernel<T, VP><<<grid, block, 0, current_stream()>>>(a, b, out, M, N, f);
  else
    binary_rowbcast_kernel<T, 1><<<grid, block, 0, current_stream()>>>(a, b, out, M, N, f);
  CHECK_LAUNCH();
}

template <class T, class F>
void binary_launch(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  const int64_t la = rowbcast_len(out.shape(), a.strides()), lb = rowbcast_len(out.shape(), b.strides());
  if (la == n && lb == n) {
    map2<T>(a, b, out, Indexed<F>{f});
  } else if (la == n && lb > 0) {
    rowbcast_launch<T>(pa, pb, po, n / lb, lb, f);
  } else if (lb == n && la > 0) {
    rowbcast_launch<T>(pb, pa, po, n / la, la, Swapped<F>{f});
  } else {
    auto st = st::cuda::make_strided2(out.shape(), a.strides(), b.strides(), "elementwise");
    binary_strided_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(pa, pb, po, st, n, f);
    CHECK_LAUNCH();
  }
}

struct ScaleF {
  float s;
  __device__ float operator()(int64_t, float x) const { return s * x; }
};

}  // namespace

void binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  check_contiguous_cuda("elementwise", {&out});
  if (!a.is_cuda() || !b.is_cuda()) ST_THROW(DeviceError, "elementwise: CUDA kernel got a host operand");
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype())
    ST_THROW(DTypeError, "elementwise: " << a.describe() << " ∘ " << b.describe() << " → " << out.describe());
  if (a.shape() != out.shape() || b.shape() != out.shape())
    ST_THROW(ShapeError, "elementwise: CUDA kernel needs operands expanded to the output's shape, got "
                             << a.describe() << " ∘ " << b.describe() << " → " << out.describe());
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
  visit_float_dtype(out.dtype(), "scale", [&](auto tag) { map1<decltype(tag)>(x, out, ScaleF{static_cast<float>(s)}); });
}

}  // namespace st::ops::cuda
