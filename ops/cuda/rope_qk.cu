// The cuDNN path's rotated q, k copy and the rotation back of its gradients (ops/cuda/rope_qk.h):
// one thread per (row, head, frequency) pair (x[i], x[i + D/2]).
#include "ops/cuda/rope_qk.h"

#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.cuh"

namespace st::ops::cuda {
namespace {

struct Pairs {
  int64_t T, heads, D, n;  // heads = H + Hkv rotated heads per row; n = B·T·heads·D/2 pairs
  // pair i → row (b·T + t), head, frequency f
  __device__ void at(int64_t i, int64_t& row, int64_t& head, int& f) const {
    const int64_t half_dim = D / 2;
    f = static_cast<int>(i % half_dim);
    const int64_t rest = i / half_dim;
    head = rest % heads;
    row = rest / heads;
  }
};

template <class T>
__global__ void rope_qk_copy_kernel(const T* qkv, T* qk, Pairs p, int64_t W, AttnRope rope) {
  const int half_dim = static_cast<int>(p.D / 2);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t row, head;
    int f;
    p.at(i, row, head, f);
    const T* x = qkv + row * W + head * p.D;
    T* y = qk + row * (p.heads * p.D) + head * p.D;
    float lo = to_float(x[f]), hi = to_float(x[f + half_dim]), c, s;
    rope_cs<T>(rope, rope.offset + row % p.T, f, half_dim, c, s);
    rope_rotate<T>(lo, hi, c, s);
    y[f] = from_float<T>(lo);
    y[f + half_dim] = from_float<T>(hi);
  }
}

template <class T>
__global__ void rope_back_qk_kernel(T* dqkv, Pairs p, int64_t W, AttnRope rope) {
  const int half_dim = static_cast<int>(p.D / 2);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t row, head;
    int f;
    p.at(i, row, head, f);
    T* g = dqkv + row * W + head * p.D;
    float lo = to_float(g[f]), hi = to_float(g[f + half_dim]), c, s;
    rope_cs<T>(rope, rope.offset + row % p.T, f, half_dim, c, s);
    rope_unrotate(lo, hi, c, s);
    g[f] = from_float<T>(lo);
    g[f + half_dim] = from_float<T>(hi);
  }
}

Pairs pairs_of(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  return {T, H + Hkv, D, B * T * (H + Hkv) * (D / 2)};
}

}  // namespace

void rope_qk_copy(DType dt, const void* qkv, void* qk, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                  const AttnRope& rope, cudaStream_t stream) {
  const Pairs p = pairs_of(B, T, H, Hkv, D);
  if (p.n == 0) return;
  visit_float_dtype(dt, "causal_attention_qkv", [&](auto tag) {
    using T_ = decltype(tag);
    rope_qk_copy_kernel<T_><<<grid_for(p.n, 256), 256, 0, stream>>>(static_cast<const T_*>(qkv), static_cast<T_*>(qk), p,
                                                                    (H + 2 * Hkv) * D, rope);
    CHECK_LAUNCH();
  });
}

void rope_back_qk(DType dt, void* dqkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, const AttnRope& rope,
                  cudaStream_t stream) {
  const Pairs p = pairs_of(B, T, H, Hkv, D);
  if (p.n == 0) return;
  visit_float_dtype(dt, "causal_attention_qkv", [&](auto tag) {
    using T_ = decltype(tag);
    rope_back_qk_kernel<T_><<<grid_for(p.n, 256), 256, 0, stream>>>(static_cast<T_*>(dqkv), p, (H + 2 * Hkv) * D, rope);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
