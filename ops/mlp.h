// The transformer MLP as one op, so that CUDA can fuse its bias and GELU work into the GEMMs:
//   mlp_gelu(x, w1, b1, w2, b2): x (..., C) → gelu_tanh(x·w1 + b1)·w2 + b2 (..., C_out)
//   w1 (C, F), b1 (F), w2 (F, C_out), b2 (C_out), weights stored (in, out) as in ops::linear.
// On CUDA in f16/bf16 the forward is two cuBLASLt GEMMs (bias + GELU epilogue that also saves the
// pre-activation, then bias: no separate GELU or bias-add kernels) and the backward four GEMMs
// (dW2 with db2 in its epilogue; dh = dy·w2ᵀ; dW1; dx) plus one own pass computing the GELU
// gradient and summing it into db1 (cuBLASLt's DGELU_BGRAD epilogue measured 2.6× slower than the
// separate GELU-gradient and column-sum kernels on the H200). Elsewhere, or where cuBLASLt has no kernel, it is linear → gelu → linear.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor mlp_gelu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);

}  // namespace st::ops
