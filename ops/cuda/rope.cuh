// Device side of the rotary embedding the attention kernels fuse into their loads of q and k
// (ops/rope.h has the expression, ops/cuda/attn_operand.h the tables' handle). The forward rotation
// rounds each product and the sum to the operand's dtype, with explicit _rn intrinsics (no fused
// multiply-add), so a roped value has the bits of the CPU's and HF's; the backward's transpose runs
// in f32 on gradients.
#pragma once
#include <type_traits>

#include "ops/cuda/attn_operand.h"
#include "ops/cuda/common.cuh"

namespace st::ops::cuda {

// x rounded to T, as f32 (f32: x)
template <class T>
__device__ inline float round_to(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return to_float(from_float<T>(x));
}

// c, s of (position p, frequency i < D/2) rounded to T (HF casts cos / sin to q's dtype)
template <class T>
__device__ inline void rope_cs(const AttnRope& r, int64_t p, int i, int half_dim, float& c, float& s) {
  c = round_to<T>(__ldg(r.cos + p * half_dim + i));
  s = round_to<T>(__ldg(r.sin + p * half_dim + i));
}

// (lo, hi) = (x[i], x[i + D/2]) → (x'[i], x'[i + D/2]) = (lo·c − hi·s, hi·c + lo·s), each product and
// the sum rounded to T
template <class T>
__device__ inline void rope_rotate(float& lo, float& hi, float c, float s) {
  const float l = lo, h = hi;
  lo = round_to<T>(__fsub_rn(round_to<T>(__fmul_rn(l, c)), round_to<T>(__fmul_rn(h, s))));
  hi = round_to<T>(__fadd_rn(round_to<T>(__fmul_rn(h, c)), round_to<T>(__fmul_rn(l, s))));
}

// the transpose on a gradient pair: (lo, hi) → (c·lo + s·hi, c·hi − s·lo), f32
__device__ inline void rope_unrotate(float& lo, float& hi, float c, float s) {
  const float l = lo, h = hi;
  lo = c * l + s * h;
  hi = c * h - s * l;
}

// Element d of a row x (D values of T, contiguous) after the rotation at position p.
template <class T>
__device__ inline float rope_element(const T* x, int d, int D, int64_t p, const AttnRope& r) {
  const int half_dim = D / 2, i = d < half_dim ? d : d - half_dim;
  float lo = to_float(x[i]), hi = to_float(x[i + half_dim]), c, s;
  rope_cs<T>(r, p, i, half_dim, c, s);
  rope_rotate<T>(lo, hi, c, s);
  return d < half_dim ? lo : hi;
}

}  // namespace st::ops::cuda
