// CUDA embedding:
//   fwd: one block per position copies row idx[n] of weight (N, C) → out (N, C); an index outside
//        [0, V) is flagged in device memory and raised as ValueError after the kernel (one
//        stream sync, as the header's contract asks).
//   bwd: deterministic scatter-add: the positions are sorted by index with a stable radix sort
//        (CUB), so each vocabulary row is summed by one block over its positions in increasing
//        position order — the CPU's order — in f32, rounded once into dweight (V, C), which is
//        overwritten (=, zero where no index points). No atomics: bit-reproducible.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/common.cuh"
#include "ops/embedding.h"
#include "tensor/graph.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;

// kernels

// weight (V, C), idx (N) → out (N, C); bad[0..1] = (position, index) of the first bad index
template <class T, class I>
__global__ void embedding_fwd_kernel(const T* weight, const I* idx, T* out, int64_t N, int64_t V, int64_t C,
                                     unsigned long long* bad) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t t = static_cast<int64_t>(idx[n]);
    if (t < 0 || t >= V) {
      if (threadIdx.x == 0 && atomicCAS(bad, ~0ull, static_cast<unsigned long long>(n)) == ~0ull)
        bad[1] = static_cast<unsigned long long>(t);
      continue;
    }
    const T* src = weight + t * C;
    T* dst = out + n * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
  }
}

// idx (N) → keys (N) int32, positions (N) int32 = 0..N-1
template <class I>
__global__ void embedding_keys_kernel(const I* idx, int32_t* keys, int32_t* pos, int64_t N) {
  for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
    keys[n] = static_cast<int32_t>(idx[n]);
    pos[n] = static_cast<int32_t>(n);
  }
}

// keys, pos (N) sorted by key (stable), dout (N, C) → dweight rows that some index points to
template <class T>
__global__ void embedding_bwd_kernel(const int32_t* keys, const int32_t* pos, const T* dout, T* dweight, int64_t N,
                                     int64_t C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int32_t k = keys[i];
    if (i > 0 && keys[i - 1] == k) continue;  // not the start of a run
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t j = i; j < N && keys[j] == k; ++j) acc += to_float(dout[static_cast<int64_t>(pos[j]) * C + c]);
      dweight[static_cast<int64_t>(k) * C + c] = from_float<T>(acc);
    }
  }
}

template <class Fn>
void visit_index(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::i32)
    fn(int32_t{});
  else if (t.dtype() == DType::i64)
    fn(int64_t{});
  else
    ST_THROW(DTypeError, "embedding: indices must be i32/i64, got " << t.describe());
}

int bits_for(int64_t V) {
  int b = 1;
  while (b < 31 && (int64_t{1} << b) < V) ++b;
  return b;
}

}  // namespace

// launchers

void embedding_fwd(const Tensor& weight, const Tensor& idx, Tensor& out) {
  check_contiguous_cuda("embedding", {&weight, &idx, &out});
  const int64_t V = weight.size(0), C = weight.size(1), N = idx.numel();
  if (N == 0) return;
  cudaStream_t stream = current_stream();
  Tensor bad = Tensor::full({2}, -1.0, DType::i64, Device::cuda);  // (position, index)
  visit_float_dtype(weight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    visit_index(idx, [&](auto itag) {
      using I = decltype(itag);
      embedding_fwd_kernel<T, I><<<grid_for(N, 1), C >= 256 ? kThreads : 64, 0, stream>>>(
          static_cast<const T*>(weight.data_ptr()), static_cast<const I*>(idx.data_ptr()),
          static_cast<T*>(out.data_ptr()), N, V, C, static_cast<unsigned long long*>(bad.data_ptr()));
      CHECK_LAUNCH();
    });
  });
  // read now (synchronises the stream), or after each replay inside a CUDA graph (tensor/graph.h)
  check_on_host(bad, [V, w = weight.describe()](const std::vector<int64_t>& b) {
    if (b[0] >= 0)
      ST_THROW(ValueError, "embedding: index " << b[1] << " at position " << b[0] << " is outside [0, V = " << V
                                               << ") for weight " << w);
  });
}

void embedding_bwd(const Tensor& idx, const Tensor& dout, Tensor& dweight) {
  check_contiguous_cuda("embedding", {&idx, &dout, &dweight});
  const int64_t V = dweight.size(0), C = dweight.size(1), N = idx.numel();
  if (N > INT32_MAX || V > INT32_MAX) ST_THROW(ShapeError, "embedding: CUDA backward takes < 2^31 positions and rows");
  cudaStream_t stream = current_stream();
  dweight.fill_(0.0);
  if (N == 0) return;
  Tensor keys = Tensor::empty({2, N}, DType::i32, Device::cuda);  // unsorted, sorted
  Tensor pos = Tensor::empty({2, N}, DType::i32, Device::cuda);
  int32_t* k0 = keys.data<int32_t>();
  int32_t* p0 = pos.data<int32_t>();
  visit_index(idx, [&](auto itag) {
    using I = decltype(itag);
    embedding_keys_kernel<I><<<grid_for(N, kThreads), kThreads, 0, stream>>>(static_cast<const I*>(idx.data_ptr()), k0,
                                                                             p0, N);
    CHECK_LAUNCH();
  });
  size_t temp_bytes = 0;
  const int n = static_cast<int>(N), bits = bits_for(V);
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k0, k0 + N, p0, p0 + N, n, 0, bits, stream));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes) + 1}, DType::f32, Device::cuda);
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, k0, k0 + N, p0, p0 + N, n, 0, bits, stream));
  visit_float_dtype(dweight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    embedding_bwd_kernel<T><<<grid_for(N, 1), C >= 256 ? kThreads : 64, 0, stream>>>(
        k0 + N, p0 + N, static_cast<const T*>(dout.data_ptr()), static_cast<T*>(dweight.data_ptr()), N, C);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
