// GELU (tanh form) in f32: one definition for the pointwise kernels (activation.cu) and the fused
// GELU gradient + column sum (reduce.cu). Same formulas as ops/cpu/activation.cpp.
#pragma once

namespace st::ops::cuda {

constexpr float kGeluBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluKappa = 0.044715f;

__device__ inline float gelu_tanh(float v) {
  return 0.5f * v * (1.f + tanhf(kGeluBeta * (v + kGeluKappa * v * v * v)));
}

// g · gelu'(v)
__device__ inline float gelu_tanh_grad(float v, float g) {
  const float v2 = v * v;
  const float t = tanhf(kGeluBeta * (v + kGeluKappa * v2 * v));
  return g * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * v2));
}

}  // namespace st::ops::cuda
