// Row helpers shared by the cross-entropy kernels (ops/cuda/cross_entropy.cu, the unfused loss,
// and ops/cuda/lm_head_loss.cu, the head fused with it): the online softmax merge and 8-value
// vector loads / stores of a row. Device code only; include after ops/cuda/common.cuh.
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

}  // namespace st::ops::cuda
