// A linear layer whose three products run in FP8 (the recipe of Transformer Engine / FP8-LM):
//
//   fp8_linear(x, w, bias, state)
//     x (..., K) f32/bf16/f16 · w (K, N) (in, out: ops/matmul.h's layout) + bias (N) → y (..., N) of x's dtype
//   forward   y  = deq(q4(x)) · deq(q4(w)) + bias                  (E4M3 · E4M3; bias in x's dtype, added
//                                                                   in f32 by the GEMM: one rounding;
//                                                                   options.forward_accum: promoted by default)
//   backward  g (..., N) the gradient of y:
//             dx = deq(qg(g)) · deq(q4(w))ᵀ                         (=, x's dtype)
//             dw = deq(q4(x))ᵀ · deq(qg(g))                         (=, w's dtype)
//             db = Σ_rows g, from g itself (not quantized), summed in f32 by g's cast as it reads g (ops/fp8_quantize.h's order)  (=, bias's dtype)
//   q4 casts to E4M3 with the state's x / w scaling, qg to the state's gradient format (E5M2 by
//   default: 2 more binades of range, 1 bit less precision; tests/bench/bench_fp8_error compares
//   the two). The gradient passes through the casts unchanged (straight-through), as for every
//   FP8 recipe.
//
// w_out_in: w is stored (N, K) (nn.Linear's layout, y = x·wᵀ: Llama's checkpoints); its cast
// gives w8ᵀ as data and w8 as data_t — the same bytes, no transposed copy of w — and dw is
// computed in that layout ((N, M)·(K, M)ᵀ: the same products as the (K, N) one, transposed).
// Layouts (Hopper's FP8 GEMMs take both operands K-contiguous, ops/fp8_matmul.h): the x cast keeps
// x8 (M, K) and x8ᵀ (K, M), the w cast w8 (K, N) and w8ᵀ (N, K), the gradient cast g8 (M, N) and
// g8ᵀ (N, M); forward = x8 · (w8ᵀ)ᵀ, dgrad = g8 · (w8)ᵀ, wgrad = x8ᵀ · (g8ᵀ)ᵀ. Backward keeps
// x8ᵀ and w8 (1 byte an element) instead of x and w, and the s⁻¹ of their casts.
//
// State: three Fp8Scaling on the layer's device; with delayed scaling, fp8_linear_update once per
// optimizer step (after backward) moves each amax into its history and sets the next scales.
// counts, when set: the three casts (x and w forward, g backward) add their overflow and underflow
// counts into it (ops/fp8_quantize.h); several layers may share one (the trainer points every
// layer's at its step state's two words, runtime/train/train_step.h).
// The model integration (`--precision fp8`) is the runtime's.
#pragma once
#include "ops/fp8_matmul.h"
#include "ops/fp8_scaling.h"
#include "tensor/tensor.h"

namespace st::ops {

struct Fp8LinearOptions {
  Fp8ScaleMode mode = Fp8ScaleMode::current;
  // the forward product's accumulation (ops/fp8_matmul.h; dgrad and wgrad: promoted). Promoted: fast
  // bought nothing at the blocks' shapes (tests/bench/bench_ops_cuda fp8gemm, H100, 2026-12-07:
  // GPT-2's block 0.643 → 0.638 ms, Llama-1B's 2.431 → 2.453 ms) for fewer bits in every sum
  Fp8Accum forward_accum = Fp8Accum::promoted;
  Fp8Format grad_format = Fp8Format::e5m2;
  int64_t history = 16;  // delayed scaling
  int margin = 0;
  bool pow2 = true;
};

struct Fp8LinearState {
  Fp8Scaling x, w, grad;  // x and w E4M3, grad in options.grad_format
  Fp8Accum forward_accum = Fp8Accum::promoted;
  Tensor counts;          // (2) i64 [overflow, underflow] on the layer's device, += by every cast; or undefined
};

Fp8LinearState fp8_linear_state(const Fp8LinearOptions& options, Device device = Device::cpu);
void fp8_linear_update(Fp8LinearState& state);  // fp8_scaling_update of all three
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, Fp8LinearState& state, bool w_out_in = false);

// fp8_linear's pieces, for the fused MLP (ops/fp8_mlp.h):
// the weight's cast with its transpose — w (K, N), or (N, K) when out_in — in the two roles
struct Fp8Weight {
  Tensor w8;         // (K, N): dgrad's operand
  Tensor w8t;        // (N, K): the forward's operand
  Tensor scale_inv;  // (1) s⁻¹
};
Fp8Weight fp8_cast_weight(const Tensor& w, Fp8LinearState& state, bool out_in);
// dw in w's layout from x8ᵀ (K, M) and g8ᵀ (N, M): (K, N), or (N, K) when out_in
Tensor fp8_weight_grad(const Tensor& xt, const Tensor& x_scale_inv, const Tensor& gt, const Tensor& g_scale_inv,
                       bool out_in, DType dtype);

}  // namespace st::ops
