// The FP8 scaling state's updates on CUDA (ops/fp8_scaling.h), the CPU's values bit for bit
// (ops/cpu/fp8_cast.cpp; the rule, fp8_scale_from_amax, is one function on both):
//   scale_current_kernel  state: s from amax (current scaling)         one thread
//   update_one            state: history ← amax, s from its max, amax ← 0 (delayed scaling): one
//                         block, the history shifted through shared memory, its max by warps
//   update_kernel         one state                                    one block
//   update_many_kernel    up to kManyStates states, block b state b    one launch for a model's
//                         GEMMs (each block as update_kernel: the same bits)
// Every value is read from and written to the state in device memory, in stream order: a captured
// CUDA graph replays the updates with the states' current values.
#include <algorithm>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/fp8_quantize.h"
#include "ops/fp8_scaling.h"

namespace st::ops::cuda {
namespace {

constexpr int kUpdateThreads = 1024;
constexpr int kManyStates = 256;  // states a launch (its parameter block: 256 × 24 bytes)

__global__ void scale_current_kernel(float* state, float fmax, int margin, bool pow2) {
  const float s = fp8_scale_from_amax(state[kFp8Amax], state[kFp8Scale], fmax, margin, pow2);
  state[kFp8Scale] = s;
  state[kFp8ScaleInv] = __fdiv_rn(1.f, s);
}

// The block's update of one state (history of n); shifted: n floats of shared memory
__device__ void update_one(float* state, int n, float fmax, int margin, bool pow2, float* shifted) {
  __shared__ uint32_t warp_max[32];
  float* h = state + kFp8History;
  const float a = state[kFp8Amax];
  const bool push = __float_as_uint(a) < 0x7f800000u;  // finite (≥ 0 by construction)
  for (int i = threadIdx.x; i < n; i += blockDim.x) shifted[i] = push ? (i == 0 ? a : h[i - 1]) : h[i];
  __syncthreads();
  uint32_t m = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    h[i] = shifted[i];
    m = max(m, __float_as_uint(shifted[i]));
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = max(m, warp_max[w]);
    const float s = fp8_scale_from_amax(__uint_as_float(m), state[kFp8Scale], fmax, margin, pow2);
    state[kFp8Scale] = s;
    state[kFp8ScaleInv] = __fdiv_rn(1.f, s);
    state[kFp8Amax] = 0.f;
  }
}

// one block; dynamic shared memory: n floats
__global__ void update_kernel(float* state, int n, float fmax, int margin, bool pow2) {
  extern __shared__ float shifted[];
  update_one(state, n, fmax, margin, pow2, shifted);
}

struct ManyStates {  // a launch's states, passed by value
  float* state[kManyStates];
  float fmax[kManyStates];
  int n[kManyStates], margin[kManyStates];
  bool pow2[kManyStates];
};

// block b: state b; dynamic shared memory: the largest n floats
__global__ void update_many_kernel(const __grid_constant__ ManyStates p) {
  extern __shared__ float shifted[];
  const int b = blockIdx.x;
  update_one(p.state[b], p.n[b], p.fmax[b], p.margin[b], p.pow2[b], shifted);
}

}  // namespace

void fp8_zero(float* p) { CHECK_CUDA(cudaMemsetAsync(p, 0, sizeof(float), current_stream())); }

void fp8_scale_current(float* state, const Fp8ScalingOptions& o) {
  scale_current_kernel<<<1, 1, 0, current_stream()>>>(state, fp8_max(o.format), o.margin, o.pow2);
  CHECK_LAUNCH();
}

void fp8_scaling_update(float* state, const Fp8ScalingOptions& o) {
  const int n = static_cast<int>(o.history);
  update_kernel<<<1, kUpdateThreads, n * sizeof(float), current_stream()>>>(state, n, fp8_max(o.format), o.margin,
                                                                            o.pow2);
  CHECK_LAUNCH();
}

void fp8_scaling_update(const std::vector<std::pair<float*, const Fp8ScalingOptions*>>& states) {
  for (size_t at = 0; at < states.size(); at += kManyStates) {
    const int count = static_cast<int>(std::min<size_t>(kManyStates, states.size() - at));
    ManyStates p{};
    int most = 0;
    for (int i = 0; i < count; ++i) {
      const auto& [state, o] = states[at + i];
      p.state[i] = state;
      p.fmax[i] = fp8_max(o->format);
      p.n[i] = static_cast<int>(o->history);
      p.margin[i] = o->margin;
      p.pow2[i] = o->pow2;
      most = std::max(most, p.n[i]);
    }
    update_many_kernel<<<count, kUpdateThreads, most * sizeof(float), current_stream()>>>(p);
    CHECK_LAUNCH();
  }
}

}  // namespace st::ops::cuda
