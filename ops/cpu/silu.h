// SiLU in f32 for the CPU kernels: one definition for ops::silu (ops/cpu/activation.cpp) and the
// fused ops::swiglu (ops/cpu/swiglu.cpp), so that the two give the same bits. PyTorch's formulas
// and order of operations (its silu / silu_backward kernels), with exp from ops/cpu_math/elementary.h
// instead of libm (docs/testing.md "CPU numerics").
#pragma once
#include "ops/cpu_math/elementary.h"

namespace st::ops::cpu {

// silu(g) = g / (1 + e^−g)
inline float silu_f32(float g) { return g / (1.f + exp_f32(-g)); }

// d · silu'(g) = d·σ·(1 + g·(1 − σ)), σ = 1/(1 + e^−g), left to right
inline float silu_grad_f32(float g, float d) {
  const float s = 1.f / (1.f + exp_f32(-g));
  return d * s * (1.f + g * (1.f - s));
}

}  // namespace st::ops::cpu
