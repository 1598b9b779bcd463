// CUDA grad_stats (ops/optim.h): the unscaled Σ w·g² and the inf/NaN flag of every gradient of a
// step in one pass, with one device→host read at the end.
//
// Chunk table: each tensor is cut into chunks of kChunk elements, one block per chunk. A launch
// covers up to kMaxTensors tensors, whose pointers, sizes, dtypes and weights travel as a kernel
// argument (__grid_constant__: read in place, no host→device copy); GPT-2's 148 tensors take 3
// launches, plus one to finish. Each block writes its weighted double sum and its inf/NaN bit to
// its own slot; one last single-block kernel adds the slots in index order. Every sum has a fixed order (per thread, then block_sum's tree), so the
// result is deterministic; there are no float atomics. Loads are 16 bytes wide where the chunk's
// address is 16-byte aligned (kChunk is a multiple of 8 elements, so an aligned tensor keeps
// every chunk aligned), scalar otherwise (views at odd offsets, e.g. ZeRO's flat buffer).
#include "ops/cuda/common.cuh"
#include "ops/optim.h"
#include "ops/step_state.h"

#include <cstddef>

namespace st::ops::cuda {
namespace {

using st::cuda::load_pack;
using st::cuda::Pack;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 32768;  // elements per block (multiple of 8)
constexpr int kMaxTensors = 64;    // per launch; the table is ~2 KiB of kernel arguments
constexpr int kFinalThreads = 1024;

enum : uint8_t { kF32, kF16, kBF16 };

struct TensorTable {
  const void* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  double weight[kMaxTensors];
  int first_block[kMaxTensors + 1];  // tensor i owns blocks [first_block[i], first_block[i + 1])
  uint8_t dtype[kMaxTensors];
};

struct StatsOut {  // what the host reads back (16 bytes)
  double sumsq;
  int found_inf;
  int pad;
};

// kernels

// x (n) of one chunk: this thread's Σ (float(x)·inv_scale)² and inf/NaN bit, in a fixed order
template <class T>
__device__ void chunk_stats(const T* x, int64_t n, float inv_scale, double& acc, bool& bad) {
  auto add = [&](T v) {
    const float f = __fmul_rn(to_float(v), inv_scale);
    bad |= !isfinite(f);
    const double d = f;
    acc += d * d;
  };
  int64_t i0 = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {  // uniform over the block
    constexpr int N = Pack<T>::N;
    const int64_t packs = n / N;
    for (int64_t k = threadIdx.x; k < packs; k += blockDim.x) {
      const Pack<T> p = load_pack(x + k * N);
#pragma unroll
      for (int j = 0; j < N; ++j) add(p.v[j]);
    }
    i0 = packs * N;
  }
  for (int64_t i = i0 + threadIdx.x; i < n; i += blockDim.x) add(x[i]);
}

// one block per chunk → partial[blockIdx.x] (w·Σ, double), flags[blockIdx.x] (inf/NaN seen)
// inv_dev: the factor in device memory (a graph-captured step, ops/step_state.h), else inv_scale
__global__ void grad_stats_chunk_kernel(const __grid_constant__ TensorTable tab, float inv_scale, const float* inv_dev,
                                        double* partial, int* flags) {
  __shared__ double scratch[32];
  if (inv_dev) inv_scale = *inv_dev;
  int t = 0;
  while (static_cast<int>(blockIdx.x) >= tab.first_block[t + 1]) ++t;
  const int64_t begin = static_cast<int64_t>(blockIdx.x - tab.first_block[t]) * kChunk;
  const int64_t n = min(kChunk, tab.numel[t] - begin);
  double acc = 0;
  bool bad = false;
  switch (tab.dtype[t]) {
    case kF32: chunk_stats(static_cast<const float*>(tab.ptr[t]) + begin, n, inv_scale, acc, bad); break;
    case kF16: chunk_stats(static_cast<const half*>(tab.ptr[t]) + begin, n, inv_scale, acc, bad); break;
    default: chunk_stats(static_cast<const bf16*>(tab.ptr[t]) + begin, n, inv_scale, acc, bad); break;
  }
  const bool any_bad = __syncthreads_or(bad);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = tab.weight[t] != 0 ? tab.weight[t] * acc : 0.0;
    flags[blockIdx.x] = any_bad ? 1 : 0;
  }
}

// partial, flags (nparts) → *sumsq: Σ partial in a fixed order, *found_inf: OR of flags
__global__ void grad_stats_final_kernel(const double* partial, const int* flags, int nparts, double* sumsq,
                                        int* found_inf) {
  __shared__ double scratch[32];
  double acc = 0;
  bool bad = false;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
    acc += partial[i];
    bad |= flags[i] != 0;
  }
  const bool any_bad = __syncthreads_or(bad);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    *sumsq = acc;
    *found_inf = any_bad ? 1 : 0;
  }
}

uint8_t code_of(DType d) {
  switch (d) {
    case DType::f32: return kF32;
    case DType::f16: return kF16;
    case DType::bf16: return kBF16;
    default: break;
  }
  ST_THROW(DTypeError, "grad_stats: CUDA kernel needs f32/f16/bf16, got " << dtype_name(d));
}

int64_t chunks_of(const Tensor& g) { return (g.numel() + kChunk - 1) / kChunk; }

// launchers

// The passes of grad_stats, their result left in device memory (*sumsq, *found_inf); false when
// there is nothing to reduce (nothing was written).
bool launch_grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, float inv_scale,
                       const float* inv_dev, double* sumsq, int* found_inf, Tensor& buf) {
  int64_t nparts = 0;
  for (const Tensor& g : grads) {
    check_contiguous_cuda("grad_stats", {&g});
    code_of(g.dtype());
    nparts += chunks_of(g);
  }
  if (nparts == 0) return false;
  ST_CHECK(nparts < (int64_t{1} << 31) - 1, ValueError, "grad_stats: " << nparts << " chunks is too many");
  cudaStream_t stream = current_stream();
  // (nparts) double partials, then the StatsOut (2 doubles' room), then (nparts) int flags
  buf = Tensor::empty({2 * (nparts + 2) + nparts}, DType::f32, Device::cuda);
  double* partial = static_cast<double*>(buf.data_ptr());
  int* flags = reinterpret_cast<int*>(partial + nparts + 2);

  int64_t base = 0;  // first partial slot of the next launch
  for (size_t first = 0; first < grads.size(); first += kMaxTensors) {
    const size_t count = std::min<size_t>(kMaxTensors, grads.size() - first);
    TensorTable tab{};
    int blocks = 0;
    for (size_t k = 0; k < count; ++k) {
      const Tensor& g = grads[first + k];
      tab.ptr[k] = g.data_ptr();
      tab.numel[k] = g.numel();
      tab.weight[k] = weights[first + k];
      tab.dtype[k] = code_of(g.dtype());
      tab.first_block[k] = blocks;
      blocks += static_cast<int>(chunks_of(g));
    }
    for (size_t k = count; k <= static_cast<size_t>(kMaxTensors); ++k) tab.first_block[k] = blocks;
    if (blocks == 0) continue;
    grad_stats_chunk_kernel<<<blocks, kThreads, 0, stream>>>(tab, inv_scale, inv_dev, partial + base, flags + base);
    CHECK_LAUNCH();
    base += blocks;
  }
  grad_stats_final_kernel<<<1, kFinalThreads, 0, stream>>>(partial, flags, static_cast<int>(nparts), sumsq, found_inf);
  CHECK_LAUNCH();
  return true;
}

}  // namespace

GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, float inv_scale) {
  Tensor buf, out_buf = Tensor::empty({4}, DType::f32, Device::cuda);  // one StatsOut
  StatsOut* out = static_cast<StatsOut*>(out_buf.data_ptr());
  if (!launch_grad_stats(grads, weights, inv_scale, nullptr, &out->sumsq, &out->found_inf, buf)) return {};
  cudaStream_t stream = current_stream();
  StatsOut host{};
  CHECK_CUDA(cudaMemcpyAsync(&host, out, sizeof(StatsOut), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return {host.sumsq, host.found_inf != 0};
}

// The same passes with the factor read from the step state and the result written into it (no
// host read): what a graph-captured step runs (ops/step_state.h).
void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, double* state) {
  char* base = reinterpret_cast<char*>(state);
  Tensor buf;
  launch_grad_stats(grads, weights, 1.f, reinterpret_cast<const float*>(base + offsetof(DeviceStepState, inv_scale)),
                    reinterpret_cast<double*>(base + offsetof(DeviceStepState, sumsq)),
                    reinterpret_cast<int*>(base + offsetof(DeviceStepState, found_inf)), buf);
}

}  // namespace st::ops::cuda
