// Shared by the CUDA ops: dtype helpers (tensor/cuda/dtype_cuda.cuh), checks, the current stream,
// and warp/block reductions. Kernels compute in f32 (f16/bf16 widened on load, rounded once on
// store), like the CPU ops.
#pragma once
#include "tensor/cuda/dtype_cuda.cuh"
#include "tensor/cuda/runtime.h"
#include "tensor/tensor.h"

namespace st::ops::cuda {

using st::cuda::bf16;
using st::cuda::current_stream;
using st::cuda::from_float;
using st::cuda::grid_for;
using st::cuda::half;
using st::cuda::to_float;
using st::cuda::visit_float_dtype;

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the total.
// `scratch` holds 32 values; the call ends with a barrier so scratch can be reused at once.
template <class T>
__device__ inline T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : T(0);
  r = warp_sum(r);
  __syncthreads();
  return r;
}
__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

inline void check_contiguous_cuda(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!t->is_cuda()) ST_THROW(DeviceError, op << ": CUDA kernel got a " << t->describe() << " tensor");
    if (!t->is_contiguous()) ST_THROW(ShapeError, op << ": CUDA kernel needs contiguous tensors, got " << t->describe());
  }
}

}  // namespace st::ops::cuda
