// The online-softmax merge of two attention results over disjoint key sets (ring attention,
// ops/block_attention.h): a query row that saw keys A with (out_a, lse_a) and keys B with
// (out_b, lse_b) has, over A ∪ B,
//   lse = log(e^lse_a + e^lse_b) = max + log1p(e^−|lse_a − lse_b|),
//   out = e^(lse_a − lse)·out_a + e^(lse_b − lse)·out_b.
// A row with lse = −inf saw no key (an empty accumulator: out 0, lse −inf); it gets weight 0, and
// two such rows merge to out 0, lse −inf, never NaN. The weights are formed in double from
// e = e^−|Δ| (CPU: exp_f64 / log_f64 of ops/cpu_math, no libm): w_max = 1/(1 + e), w_min = e/(1 + e).
// CPU (ops/attention_merge.cpp) and CUDA (ops/cuda/attention_merge.cu), one loop per query row.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

// In place: (out, lse) ← merge((out, lse), (out_b, lse_b)).
//   out (B, H, T, D) f32 contiguous, the accumulator; out_b (B, H, T, D) any float dtype;
//   lse (B, H, T) f32 contiguous; lse_b (B, H, T) f32.
void merge_attention(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b);

// An empty accumulator for merge_attention: out (B, H, T, D) zeros, lse (B, H, T) −inf, f32.
void empty_attention(int64_t B, int64_t H, int64_t T, int64_t D, Tensor& out, Tensor& lse, Device device = Device::cpu);

namespace cuda {
// out, lse contiguous f32 (checked by the entry point); out_b any float dtype
void merge_attention(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b);
}  // namespace cuda

}  // namespace st::ops
