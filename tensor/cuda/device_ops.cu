// CUDA primitives of the tensor core: copies (host↔device, and device strided copies with
// casts), fill and accumulate (dst += alpha·src; f16/bf16 accumulate in f32, round once).
// Everything is ordered on the current stream. Copies that touch host memory synchronise that
// stream before returning, because the host buffer may be read or freed right after.
// Device kernels: contiguous operands move 16 bytes (of the wider dtype) per load when both
// pointers are aligned, else one element per load; strided copies whose innermost dim is
// contiguous on both sides (transposes of (B, T, H, D) and the like) move whole rows the same
// way; any other view takes the general strided kernel.
#include "tensor/cuda/dtype_cuda.cuh"
#include "tensor/cuda/runtime.h"
#include "tensor/cuda/strided.cuh"
#include "tensor/device_ops.h"

namespace st::cuda {
namespace {

constexpr int kThreads = 256;

// V elements of T moved as one load/store of V·sizeof(T) ≤ 16 bytes (the address must be aligned
// to that size).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
// Elements per vector when moving D ← S: 16 bytes of the wider type.
template <class D, class S>
inline constexpr int kVec = 16 / (sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// dst += alpha·src for one element (f16/bf16 in f32, integers in double)
template <class D, class S>
__device__ inline D add_one(D d, S s, double alpha) {
  if constexpr (is_float_type<D>)
    return from_float<D>(to_float(d) + static_cast<float>(alpha) * to_float(convert<float>(s)));
  else
    return static_cast<D>(static_cast<double>(d) + alpha * static_cast<double>(convert<double>(s)));
}

// kernels

// dst, src (n) contiguous. V > 1: both aligned to V elements; the tail past the last whole
// vector is done element by element.
template <class D, class S, int V>
__global__ void copy_contig_kernel(D* dst, const S* src, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t p = t0; p < nv; p += stride) {
    const Vec<S, V> s = reinterpret_cast<const Vec<S, V>*>(src)[p];
    Vec<D, V> d;
#pragma unroll
    for (int j = 0; j < V; ++j) d.v[j] = convert<D>(s.v[j]);
    reinterpret_cast<Vec<D, V>*>(dst)[p] = d;
  }
  for (int64_t i = nv * V + t0; i < n; i += stride) dst[i] = convert<D>(src[i]);
}

// Views whose innermost dim is contiguous on both sides: rows of `row_len` elements (row_len/V
// vectors); `outer` (the other dims) gives each row's start in dst (s0) and src (s1). A flat
// index over every vector of every row, with 32-bit index arithmetic (total < 2^32).
// V > 1: row_len, the outer strides and both base pointers are multiples of V elements.
template <class D, class S, int V>
__global__ void copy_rows_kernel(D* dst, const S* src, Strided2 outer, uint32_t vecs_per_row, uint32_t total) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    uint32_t row = i / vecs_per_row;
    const uint32_t p = i - row * vecs_per_row;
    int64_t od = 0, os = 0;
    for (int d = outer.nd - 1; d >= 0; --d) {
      const uint32_t sh = static_cast<uint32_t>(outer.shape[d]);
      const uint32_t idx = row % sh;
      row /= sh;
      od += idx * outer.s0[d];
      os += idx * outer.s1[d];
    }
    const Vec<S, V> s = *reinterpret_cast<const Vec<S, V>*>(src + os + static_cast<int64_t>(p) * V);
    Vec<D, V> d;
#pragma unroll
    for (int j = 0; j < V; ++j) d.v[j] = convert<D>(s.v[j]);
    *reinterpret_cast<Vec<D, V>*>(dst + od + static_cast<int64_t>(p) * V) = d;
  }
}

template <class D, class S>
__global__ void copy_strided_kernel(D* dst, const S* src, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, os;
    st.offsets(i, od, os);
    dst[od] = convert<D>(src[os]);
  }
}

// dst (n) contiguous; V > 1: aligned to V elements
template <class T, int V>
__global__ void fill_contig_kernel(T* dst, T v, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  Vec<T, V> pv;
#pragma unroll
  for (int j = 0; j < V; ++j) pv.v[j] = v;
  for (int64_t p = t0; p < nv; p += stride) reinterpret_cast<Vec<T, V>*>(dst)[p] = pv;
  for (int64_t i = nv * V + t0; i < n; i += stride) dst[i] = v;
}

template <class T>
__global__ void fill_kernel(T* dst, T v, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, unused;
    st.offsets(i, od, unused);
    dst[od] = v;
  }
}

// dst, src (n) contiguous; V > 1: both aligned to V elements
template <class D, class S, int V>
__global__ void add_contig_kernel(D* dst, const S* src, double alpha, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t p = t0; p < nv; p += stride) {
    const Vec<S, V> s = reinterpret_cast<const Vec<S, V>*>(src)[p];
    Vec<D, V> d = reinterpret_cast<const Vec<D, V>*>(dst)[p];
#pragma unroll
    for (int j = 0; j < V; ++j) d.v[j] = add_one(d.v[j], s.v[j], alpha);
    reinterpret_cast<Vec<D, V>*>(dst)[p] = d;
  }
  for (int64_t i = nv * V + t0; i < n; i += stride) dst[i] = add_one(dst[i], src[i], alpha);
}

template <class D, class S>
__global__ void add_kernel(D* dst, const S* src, double alpha, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, os;
    st.offsets(i, od, os);
    dst[od] = add_one(dst[od], src[os], alpha);
  }
}

// launchers

// Both contiguous: whole vectors when both pointers are aligned to them, else element by element.
template <class D, class S>
void copy_contig(D* d, const S* s, int64_t n, cudaStream_t stream) {
  constexpr int V = kVec<D, S>;
  if (aligned_to(d, V * sizeof(D)) && aligned_to(s, V * sizeof(S)))
    copy_contig_kernel<D, S, V><<<grid_for(n / V + 1, kThreads), kThreads, 0, stream>>>(d, s, n);
  else
    copy_contig_kernel<D, S, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, s, n);
}

// Innermost dim contiguous on both sides (after merging): row kernel; false when not applicable.
template <class D, class S>
bool copy_rows(D* d, const S* s, const Strided2& st, int64_t n, cudaStream_t stream) {
  if (st.nd < 1 || st.s0[st.nd - 1] != 1 || st.s1[st.nd - 1] != 1) return false;
  constexpr int V = kVec<D, S>;
  const int64_t len = st.shape[st.nd - 1];
  Strided2 outer;
  outer.nd = st.nd - 1;
  bool vec = len % V == 0 && aligned_to(d, V * sizeof(D)) && aligned_to(s, V * sizeof(S));
  for (int k = 0; k < outer.nd; ++k) {
    outer.shape[k] = st.shape[k];
    outer.s0[k] = st.s0[k];
    outer.s1[k] = st.s1[k];
    vec = vec && st.s0[k] % V == 0 && st.s1[k] % V == 0;
  }
  const int64_t total = vec ? n / V : n;
  if (total > static_cast<int64_t>(UINT32_MAX) - 65535LL * 32 * kThreads) return false;  // i + stride fits
  const uint32_t per_row = static_cast<uint32_t>(vec ? len / V : len), t = static_cast<uint32_t>(total);
  if (vec)
    copy_rows_kernel<D, S, V><<<grid_for(total, kThreads), kThreads, 0, stream>>>(d, s, outer, per_row, t);
  else
    copy_rows_kernel<D, S, 1><<<grid_for(total, kThreads), kThreads, 0, stream>>>(d, s, outer, per_row, t);
  return true;
}

void copy_device(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    CHECK_CUDA(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  visit_cuda_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_cuda_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      if (dst.is_contiguous() && src.is_contiguous()) {
        copy_contig(d, s, n, stream);
      } else {
        Strided2 st = make_strided2(dst.shape(), dst.strides(), src.strides(), "copy");
        if (!copy_rows(d, s, st, n, stream))
          copy_strided_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, s, st, n);
      }
      CHECK_LAUNCH();
    });
  });
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  cudaStream_t stream = current_stream();
  if (dst.is_cuda() && src.is_cuda()) return copy_device(dst, src, stream);
  if (dst.dtype() != src.dtype() || !dst.is_contiguous() || !src.is_contiguous())
    ST_THROW(DeviceError, "cuda::copy across host and device needs contiguous tensors of one dtype, got "
                              << dst.describe() << " ← " << src.describe());
  if (dst.numel() == 0) return;
  cudaMemcpyKind kind = dst.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  CHECK_CUDA(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), kind, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
}

void fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  visit_cuda_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (is_float_type<T>)
      v = from_float<T>(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    T* d = static_cast<T*>(dst.data_ptr());
    constexpr int V = kVec<T, T>;
    if (dst.is_contiguous() && aligned_to(d, 16)) {
      fill_contig_kernel<T, V><<<grid_for(n / V + 1, kThreads), kThreads, 0, stream>>>(d, v, n);
    } else if (dst.is_contiguous()) {
      fill_contig_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, v, n);
    } else {
      Strided2 st = make_strided2(dst.shape(), dst.strides(), dst.strides(), "fill");
      fill_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, v, st, n);
    }
    CHECK_LAUNCH();
  });
}

void add(const Tensor& dst, const Tensor& src, double alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (!dst.is_cuda() || !src.is_cuda())
    ST_THROW(DeviceError, "cuda::add: both tensors must be on the GPU, got " << dst.describe() << " += "
                                                                            << src.describe());
  cudaStream_t stream = current_stream();
  visit_cuda_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_cuda_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      constexpr int V = kVec<D, S>;
      if (dst.is_contiguous() && src.is_contiguous() && aligned_to(d, V * sizeof(D)) && aligned_to(s, V * sizeof(S))) {
        add_contig_kernel<D, S, V><<<grid_for(n / V + 1, kThreads), kThreads, 0, stream>>>(d, s, alpha, n);
      } else if (dst.is_contiguous() && src.is_contiguous()) {
        add_contig_kernel<D, S, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, s, alpha, n);
      } else {
        Strided2 st = make_strided2(dst.shape(), dst.strides(), src.strides(), "add_");
        add_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, s, alpha, st, n);
      }
      CHECK_LAUNCH();
    });
  });
}

}  // namespace st::cuda
