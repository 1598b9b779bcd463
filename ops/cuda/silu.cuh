// SiLU in f32 on the device: one definition for ops::silu (activation.cu) and the fused
// ops::swiglu (swiglu.cu), so that the two give the same bits. PyTorch's formulas and order (its
// silu / silu_backward kernels), each operation rounded on its own (__f*_rn: no contraction into
// an FMA, whichever kernel inlines it). Same formulas as ops/cpu/silu.h.
#pragma once

namespace st::ops::cuda {

// silu(g) = g / (1 + e^−g)
__device__ inline float silu_f32(float g) { return __fdiv_rn(g, __fadd_rn(1.f, expf(-g))); }

// d · silu'(g) = d·σ·(1 + g·(1 − σ)), σ = 1/(1 + e^−g), left to right
__device__ inline float silu_grad_f32(float g, float d) {
  const float s = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-g)));
  return __fmul_rn(__fmul_rn(d, s), __fadd_rn(1.f, __fmul_rn(g, __fsub_rn(1.f, s))));
}

}  // namespace st::ops::cuda
