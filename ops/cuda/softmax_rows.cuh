// Row helpers shared by the cross-entropy kernels (ops/cuda/cross_entropy.cu, the unfused loss,
// and ops/cuda/lm_head_loss.cu, the head fused with it): the online softmax merge, 8-value vector
// loads / stores of a row, and a row's softmax statistics over a block. Device code only; include after ops/cuda/common.cuh.
#pragma once
#include "ops/cuda/common.cuh"

namespace st::ops::cuda {

// merges a partial (max m2, Σ exp(x − m2) = s2) into (m, s): the online softmax's combine
__device__ inline void online_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

// 8 consecutive values from / to 16-byte-aligned memory (T f16/bf16: one 16-byte access; f32: two)
template <class T>
__device__ inline void load8(const T* p, float (&x)[8]) {
  constexpr int per = 16 / sizeof(T);
#pragma unroll
  for (int h = 0; h < 8 / per; ++h) {
    int4 v = *reinterpret_cast<const int4*>(p + h * per);
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int j = 0; j < per; ++j) x[h * per + j] = to_float(e[j]);
  }
}
template <class T>
__device__ inline void store8(T* p, const float (&x)[8]) {
  constexpr int per = 16 / sizeof(T);
#pragma unroll
  for (int h = 0; h < 8 / per; ++h) {
    int4 v;
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int j = 0; j < per; ++j) e[j] = from_float<T>(x[h * per + j]);
    *reinterpret_cast<int4*>(p + h * per) = v;
  }
}

// The online softmax statistics of one row x (V) over a block (blockDim.x a multiple of 32, ≤ 1024):
// each thread takes runs of 8 consecutive values (kVec: one 16-byte load each when the row is
// aligned, so a warp reads 512 contiguous bytes per instruction), one rescale per run; then the
// warps' and the block's partials merge. Returns (M, S) = (max, Σ exp(x − M)) in thread 0 (other
// threads: their partial). sm, ss: 32 floats of shared scratch each; ends with every warp's partial
// written (a __syncthreads inside), so the caller syncs again before reusing them.
template <class T, bool kVec>
__device__ inline float2 block_row_max_sumexp(const T* xr, int64_t V, float* sm, float* ss) {
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x * 8LL; c < V; c += blockDim.x * 8LL) {
    float v[8];
    float lm = -INFINITY;
    if constexpr (kVec) {
      load8(xr + c, v);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = c + j < V ? to_float(xr[c + j]) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) lm = fmaxf(lm, v[j]);
    if (lm > m) {
      s *= __expf(m - lm);
      m = lm;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) s += __expf(v[j] - m);
  }
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    m = sm[0], s = ss[0];
    for (int w = 1; w < nw; ++w) online_merge(m, s, sm[w], ss[w]);
  }
  return make_float2(m, s);
}

}  // namespace st::ops::cuda
