// CUDA sum over dims: x (...) any strides → out (x's shape with reduced dims set to 1, keepdim),
// out contiguous in x's dtype. Accumulates in double, as the CPU op does. Two paths:
//   - column sum (the bias gradient): x contiguous and the reduced dims are its leading dims, so x
//     is (M, N) and out (N). Threads of a warp take adjacent columns (16-byte packs when aligned
//     and N allows), each block sums a slice of rows into part (S, N), then a second kernel sums
//     the S slices (32 slice lanes per column, then the lanes in order). No atomics:
//     bit-reproducible run to run. The same kernels sum
//     the GELU gradient as they compute it (gelu_bwd_sum_cols: the MLP's dpre and db1 in one pass
//     over pre and dh; db1 equals sum(dpre, {0}) bit for bit, the values and order being the same).
//   - anything else: one block per output element; each thread walks a slice of the reduced index
//     space, then one block reduction.
// argmax: one block per row; each thread keeps the first largest non-NaN value of its strided
// slice, then the block keeps the largest, ties to the lower index: the CPU op's answer exactly.
#include "ops/activation.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.cuh"
#include "ops/reduce.h"
#include "tensor/cuda/strided.cuh"

namespace st::ops::cuda {
namespace {

using st::cuda::load_pack;
using st::cuda::Pack;

constexpr int kThreads = 256;
constexpr int kColX = 32, kColY = 8;      // column-sum block: 32 column packs × 8 row lanes
// Column-sum grid: ~4 blocks of 8 warps per SM on an H200; more slices would add partial traffic
// ((S, N) doubles written and read back) without adding loads in flight.
constexpr int64_t kTargetBlocks = 512;

// kernels

// kept: offsets of output element o into x via (shape, strides) of the kept dims (s0 = x strides);
// red: the reduced dims (s0 = x strides). out[o] = Σ over red.
template <class T>
__global__ void sum_kernel(const T* x, T* out, st::cuda::Strided2 kept, st::cuda::Strided2 red, int64_t n_out,
                           int64_t n_red) {
  __shared__ double scratch[32];
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    int64_t base, unused;
    kept.offsets(o, base, unused);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < n_red; r += blockDim.x) {
      int64_t off;
      red.offsets(r, off, unused);
      acc += static_cast<double>(to_float(x[base + off]));
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[o] = from_float<T>(static_cast<float>(acc));
  }
}

// Row sources of the column sum: load<V>(off, v) gives the V values at flat offset off of the
// (M, N) matrix being summed (V > 1: one 16-byte pack, aligned).
template <class T>
struct PlainRows {  // x itself
  const T* x;
  template <int V>
  __device__ void load(int64_t off, T (&v)[V]) const {
    if constexpr (V > 1) {
      const Pack<T> p = load_pack(x + off);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = p.v[j];
    } else {
      v[0] = x[off];
    }
  }
};
template <class T>
struct GeluGradRows {  // dx = dy · gelu'(x), written as it is summed
  const T* x;
  const T* dy;
  T* dx;
  template <int V>
  __device__ void load(int64_t off, T (&v)[V]) const {
    if constexpr (V > 1) {
      const Pack<T> a = load_pack(x + off), g = load_pack(dy + off);
      Pack<T> r;
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = r.v[j] = from_float<T>(gelu_tanh_grad(to_float(a.v[j]), to_float(g.v[j])));
      st::cuda::store_pack(dx + off, r);
    } else {
      v[0] = dx[off] = from_float<T>(gelu_tanh_grad(to_float(x[off]), to_float(dy[off])));
    }
  }
};

// (M, N) rows of src → part (S, N): part[s][c] = Σ x[r][c] over the rows r of slice s
// (rows_per_slice each). Block (kColX, kColY): threadIdx.x a pack of V adjacent columns,
// threadIdx.y a row lane. V = Pack<T>::N needs 16-byte aligned rows and N % V == 0; V = 1 otherwise.
template <class T, int V, class Src>
__global__ void sum_cols_partial_kernel(Src src, double* part, int64_t M, int64_t N, int64_t rows_per_slice) {
  __shared__ double sh[V][kColY][kColX];
  const int64_t c0 = (blockIdx.x * (int64_t)kColX + threadIdx.x) * V;
  const int64_t r0 = blockIdx.y * rows_per_slice, r1 = min(M, r0 + rows_per_slice);
  double acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0;
  if (c0 < N) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      T v[V];
      src.template load<V>(r * N + c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += static_cast<double>(to_float(v[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) sh[j][threadIdx.y][threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && c0 < N) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      double t = 0;
      for (int k = 0; k < kColY; ++k) t += sh[j][k][threadIdx.x];  // fixed row-lane order
      part[blockIdx.y * N + c0 + j] = t;
    }
  }
}

// part (S, N) → out (N). Block (kColX, kFinalY): threadIdx.x a column (adjacent columns per warp:
// coalesced), threadIdx.y a slice lane summing slices y, y + kFinalY, … in order; then the lanes'
// sums added in lane order. A fixed order, so bit-reproducible; the serial chain is S / kFinalY
// adds instead of S (one thread per column walked all S slices: 0.5 ms of a 14 ms f32 step of the
// seed model went there, N = 256 columns, S = 256 slices).
constexpr int kFinalY = 32;
template <class T>
__global__ void sum_cols_final_kernel(const double* part, T* out, int64_t S, int64_t N) {
  __shared__ double sh[kFinalY][kColX + 1];
  const int64_t c = blockIdx.x * (int64_t)kColX + threadIdx.x;
  double t = 0;
  if (c < N)
    for (int64_t s = threadIdx.y; s < S; s += kFinalY) t += part[s * N + c];
  sh[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < N) {
    double u = 0;
    for (int k = 0; k < kFinalY; ++k) u += sh[k][threadIdx.x];
    out[c] = from_float<T>(static_cast<float>(u));
  }
}

// launchers

// (M, N) rows of src → out (N); vec: every row pointer 16-byte aligned (and N % pack == 0 checked here)
template <class T, class Src>
void sum_cols(const Src& src, bool vec, Tensor& out, int64_t M, int64_t N) {
  cudaStream_t stream = current_stream();
  constexpr int VP = Pack<T>::N;
  vec = vec && N % VP == 0;
  const int64_t packs = vec ? N / VP : N;
  const int64_t gx = (packs + kColX - 1) / kColX;
  int64_t S = std::max<int64_t>(1, std::min<int64_t>((kTargetBlocks + gx - 1) / gx, (M + kColY - 1) / kColY));
  S = std::min<int64_t>(S, 65535);
  const int64_t rows_per_slice = (M + S - 1) / S;
  S = (M + rows_per_slice - 1) / rows_per_slice;
  // (S, N) doubles; i64 is the 8-byte dtype the allocator knows, the kernels read it as double.
  Tensor part = Tensor::empty({S, N}, DType::i64, Device::cuda);
  double* pp = static_cast<double*>(part.data_ptr());
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(S)), block(kColX, kColY);
  if (vec)
    sum_cols_partial_kernel<T, VP><<<grid, block, 0, stream>>>(src, pp, M, N, rows_per_slice);
  else
    sum_cols_partial_kernel<T, 1><<<grid, block, 0, stream>>>(src, pp, M, N, rows_per_slice);
  CHECK_LAUNCH();
  sum_cols_final_kernel<T><<<static_cast<unsigned>((N + kColX - 1) / kColX), dim3(kColX, kFinalY), 0, stream>>>(
      pp, static_cast<T*>(out.data_ptr()), S, N);
  CHECK_LAUNCH();
}

// rows (R, V) → out (R): one block per row (grid-strided), kThreads threads
template <class T>
__global__ void argmax_kernel(const T* x, int64_t* out, int64_t R, int64_t V) {
  __shared__ float best_v[kThreads];
  __shared__ int64_t best_i[kThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* row = x + r * V;
    float bv = 0.f;
    int64_t bi = -1;  // -1: nothing but NaN seen
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      const float f = to_float(row[v]);
      if (f != f) continue;
      if (bi < 0 || f > bv) bv = f, bi = v;  // v increases: ties keep the first
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        const float ov = best_v[threadIdx.x + s];
        const int64_t oi = best_i[threadIdx.x + s];
        const int64_t mi = best_i[threadIdx.x];
        if (oi >= 0 && (mi < 0 || ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < mi))) {
          best_v[threadIdx.x] = ov;
          best_i[threadIdx.x] = oi;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = best_i[0] < 0 ? 0 : best_i[0];
    __syncthreads();
  }
}

}  // namespace

void argmax_fwd(const Tensor& x, Tensor& out) {
  check_contiguous_cuda("argmax", {&x, &out});
  ST_CHECK(out.dtype() == DType::i64 && x.dim() == 2 && out.numel() == x.size(0), DTypeError,
           "argmax: CUDA kernel needs x (R, V) and out (R) i64, got " << x.describe() << ", " << out.describe());
  const int64_t R = x.size(0), V = x.size(1);
  if (R == 0) return;
  visit_float_dtype(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(R, 1), kThreads, 0, current_stream()>>>(static_cast<const T*>(x.data_ptr()),
                                                                        static_cast<int64_t*>(out.data_ptr()), R, V);
    CHECK_LAUNCH();
  });
}

void sum_fwd(const Tensor& x, Tensor& out) {
  check_contiguous_cuda("sum", {&out});
  if (!x.is_cuda()) ST_THROW(DeviceError, "sum: CUDA kernel got " << x.describe());
  if (out.dtype() != x.dtype()) ST_THROW(DTypeError, "sum: CUDA kernel writes x's dtype, got " << out.describe());
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  Shape kshape, kstr, rshape, rstr;
  bool leading = true;  // every reduced dim (of size > 1) comes before every kept dim (of size > 1)
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (out.shape()[d] == 1 && x.shape()[d] != 1) {
      if (!kshape.empty()) leading = false;
      rshape.push_back(x.shape()[d]);
      rstr.push_back(x.strides()[d]);
    } else if (x.shape()[d] != 1) {
      kshape.push_back(x.shape()[d]);
      kstr.push_back(x.strides()[d]);
    }
  }
  const int64_t n_red = shape_numel(rshape);
  if (leading && x.is_contiguous() && n_red > 1 && n_out > 1) {
    visit_float_dtype(x.dtype(), "sum", [&](auto tag) {
      using T = decltype(tag);
      const T* px = static_cast<const T*>(x.data_ptr());
      sum_cols<T>(PlainRows<T>{px}, st::cuda::aligned16(px), out, n_red, n_out);
    });
    return;
  }
  auto kept = st::cuda::make_strided2(kshape, kstr, kstr, "sum");
  auto red = st::cuda::make_strided2(rshape, rstr, rstr, "sum");
  visit_float_dtype(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    int threads = n_red >= kThreads ? kThreads : 32;
    sum_kernel<T><<<grid_for(n_out, 1), threads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), kept, red, n_out, n_red);
    CHECK_LAUNCH();
  });
}

void gelu_bwd_sum_cols(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& col_sum) {
  check_contiguous_cuda("gelu_bwd_sum_cols", {&x, &dy, &dx, &col_sum});
  ST_CHECK(x.dim() == 2 && dy.shape() == x.shape() && dx.shape() == x.shape() && col_sum.dim() == 1 &&
               col_sum.size(0) == x.size(1),
           ShapeError,
           "gelu_bwd_sum_cols: x " << shape_str(x.shape()) << ", dy " << shape_str(dy.shape()) << ", dx "
                                   << shape_str(dx.shape()) << ", col_sum " << shape_str(col_sum.shape()));
  ST_CHECK(dy.dtype() == x.dtype() && dx.dtype() == x.dtype() && col_sum.dtype() == x.dtype(), DTypeError,
           "gelu_bwd_sum_cols: x, dy, dx, col_sum must share a dtype");
  const int64_t M = x.size(0), N = x.size(1);
  if (N == 0) return;
  if (M == 0) {
    col_sum.fill_(0.0);
    return;
  }
  visit_float_dtype(x.dtype(), "gelu_bwd_sum_cols", [&](auto tag) {
    using T = decltype(tag);
    GeluGradRows<T> src{static_cast<const T*>(x.data_ptr()), static_cast<const T*>(dy.data_ptr()),
                        static_cast<T*>(dx.data_ptr())};
    const bool vec = st::cuda::aligned16(src.x) && st::cuda::aligned16(src.dy) && st::cuda::aligned16(src.dx);
    sum_cols<T>(src, vec, col_sum, M, N);
  });
}

}  // namespace st::ops::cuda
