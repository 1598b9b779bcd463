// The GELU MLP with its two products in FP8, one autograd node, so that the GELU and its gradient
// are computed by the casts that read them instead of passes of their own:
//
//   fp8_mlp_gelu(x, w_up, b_up, w_down, b_down, up, down)
//     x (..., C) · w_up (C, U) + b_up (U) → pre (..., U);  y = gelu(pre) · w_down (U, N) + b_down (N)
//     → y (..., N) of x's dtype; b_up, b_down may be undefined (tensor parallelism adds the row
//     bias after its reduction)
//   the bits of fp8_linear(gelu(fp8_linear(x, w_up, b_up, up)), w_down, b_down, down) (ops/fp8_linear.h),
//   forward and backward, the scaling states and counts included: the same casts, products and
//   roundings in the same order — except that
//     forward   h = gelu(pre) is cast by fp8_quantize_act(gelu, pre) (x never written: h8, h8ᵀ)
//     backward  dpre = dh · gelu'(pre) is cast by fp8_quantize_act(gelu_grad, pre, dh), its column
//               sums the up bias's gradient (dpre never written)
//   which save, per element of pre, h's write and read and dpre's write and read: 8 bytes of a
//   bf16 (M, 4C) tensor each step (fused on CUDA under delayed scaling; ops/fp8_quantize.h).
// States: up's x / w / grad scalings cast x, w_up and dpre; down's cast h, w_down and dy.
// Saved for backward: pre (..., U), x8ᵀ, h8ᵀ, w_up8, w_down8 and the four s⁻¹ — what the unfused
// pair saves (GELU keeps pre, each fp8_linear its input's transpose and its weight).
#pragma once
#include "ops/fp8_linear.h"

namespace st::ops {

Tensor fp8_mlp_gelu(const Tensor& x, const Tensor& w_up, const Tensor& b_up, const Tensor& w_down,
                    const Tensor& b_down, Fp8LinearState& up, Fp8LinearState& down);

}  // namespace st::ops
