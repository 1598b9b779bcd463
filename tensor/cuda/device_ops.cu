// CUDA primitives of the tensor core: copies (host↔device, and device strided copies with
// casts), fill and accumulate (dst += alpha·src; f16/bf16 accumulate in f32, round once).
// Everything is ordered on the current stream. Copies that touch host memory synchronise that
// stream before returning, because the host buffer may be read or freed right after.
#include "tensor/cuda/dtype_cuda.cuh"
#include "tensor/cuda/runtime.h"
#include "tensor/cuda/strided.cuh"
#include "tensor/device_ops.h"

namespace st::cuda {
namespace {

constexpr int kThreads = 256;

// kernels

template <class D, class S>
__global__ void copy_contig_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = convert<D>(src[i]);
}

template <class D, class S>
__global__ void copy_strided_kernel(D* dst, const S* src, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, os;
    st.offsets(i, od, os);
    dst[od] = convert<D>(src[os]);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, T v, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, unused;
    st.offsets(i, od, unused);
    dst[od] = v;
  }
}

template <class D, class S>
__global__ void add_kernel(D* dst, const S* src, double alpha, Strided2 st, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, os;
    st.offsets(i, od, os);
    if constexpr (is_float_type<D>) {
      float acc = to_float(dst[od]) + static_cast<float>(alpha) * to_float(convert<float>(src[os]));
      dst[od] = from_float<D>(acc);
    } else {
      dst[od] = static_cast<D>(static_cast<double>(dst[od]) + alpha * static_cast<double>(convert<double>(src[os])));
    }
  }
}

// launchers

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
        copy_contig_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, stream>>>(d, s, n);
      } else {
        Strided2 st = make_strided2(dst.shape(), dst.strides(), src.strides(), "copy");
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
    Strided2 st = make_strided2(dst.shape(), dst.strides(), dst.strides(), "fill");
    fill_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dst.data_ptr()), v, st, n);
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
      Strided2 st = make_strided2(dst.shape(), dst.strides(), src.strides(), "add_");
      add_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          static_cast<D*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr()), alpha, st, n);
      CHECK_LAUNCH();
    });
  });
}

}  // namespace st::cuda
