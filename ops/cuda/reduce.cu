// CUDA sum over dims: x (...) any strides → out (x's shape with reduced dims set to 1, keepdim),
// out contiguous in x's dtype. One block per output element; each thread walks a slice of the
// reduced index space and accumulates in double (as the CPU op does), then one block reduction.
#include "ops/cuda/common.cuh"
#include "ops/reduce.h"
#include "tensor/cuda/strided.cuh"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;

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

// launchers


}  // namespace

void sum_fwd(const Tensor& x, Tensor& out) {
  check_contiguous_cuda("sum", {&out});
  if (!x.is_cuda()) ST_THROW(DeviceError, "sum: CUDA kernel got " << x.describe());
  if (out.dtype() != x.dtype()) ST_THROW(DTypeError, "sum: CUDA kernel writes x's dtype, got " << out.describe());
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  Shape kshape, kstr, rshape, rstr;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (out.shape()[d] == 1 && x.shape()[d] != 1) {
      rshape.push_back(x.shape()[d]);
      rstr.push_back(x.strides()[d]);
    } else {
      kshape.push_back(x.shape()[d]);
      kstr.push_back(x.strides()[d]);
    }
  }
  auto kept = st::cuda::make_strided2(kshape, kstr, kstr, "sum");
  auto red = st::cuda::make_strided2(rshape, rstr, rstr, "sum");
  const int64_t n_red = shape_numel(rshape);
  visit_float_dtype(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    int threads = n_red >= kThreads ? kThreads : 32;
    sum_kernel<T><<<grid_for(n_out, 1), threads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), kept, red, n_out, n_red);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
