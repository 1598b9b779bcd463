// The MLP with its two products in FP8 as one autograd node, so that the activation and its
// gradient are computed by the casts that read them instead of passes of their own:
//
//   fp8_mlp(x, p, act, up, down)
//     pre (..., U) = x (..., C) · w_up + b_up;  h = act(pre);  y (..., N) = h · w_down + b_down
//     act gelu:   h = ops::gelu(pre) (..., U)
//     act swiglu: pre = [gate | up] (..., 2F) (w_up the two projections side by side, ops/swiglu.h),
//                 h = ops::swiglu(pre) (..., F)
//     w_up (C, U), w_down (H, N) (H = U, or F for swiglu) — or (U, C), (N, H) when p.out_in
//     (nn.Linear's layout: fp8_linear's w_out_in); b_up, b_down may be undefined (tensor
//     parallelism adds the row bias after its reduction) → y (..., N) of x's dtype
//   the bits of fp8_linear(act(fp8_linear(x, w_up, b_up, up)), w_down, b_down, down)
//   (ops/fp8_linear.h, ops/activation.h / swiglu.h), forward and backward, the scaling states and
//   counts included: the same casts, products and roundings in the same order — except that
//     forward   h is cast by fp8_quantize_act(act, pre) (h never written: h8, h8ᵀ)
//     backward  dpre (act's input gradient for dh) is cast by fp8_quantize_act(act's gradient,
//               pre, dh), its column sums the up bias's gradient (dpre never written)
//   which saves, per element of pre, h's write and read and dpre's write and read (gelu: 8 bytes
//   of a bf16 (M, 4C); swiglu: 12 bytes an element of h) each step — fused on CUDA under delayed
//   scaling (ops/fp8_quantize.h).
// States: up's x / w / grad scalings cast x, w_up and dpre; down's cast h, w_down and dy.
// Saved for backward: pre, x8ᵀ, h8ᵀ, w_up8, w_down8 and the four s⁻¹ — what the unfused ops save
// (the activation keeps pre, each fp8_linear its input's transpose and its weight).
#pragma once
#include "ops/fp8_linear.h"

namespace st::ops {

enum class Fp8MlpAct { gelu, swiglu };

struct Fp8MlpWeights {
  Tensor w_up, b_up, w_down, b_down;
  bool out_in = false;  // both weights stored (out, in)
};

Tensor fp8_mlp(const Tensor& x, const Fp8MlpWeights& p, Fp8MlpAct act, Fp8LinearState& up, Fp8LinearState& down);

}  // namespace st::ops
