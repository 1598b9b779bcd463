// The LM head fused with the cross-entropy, in row chunks: training without the (N, V) logits.
//   lm_head_cross_entropy(h (N, C), w (V, C), targets (N) i32/i64) → loss () f32, the same function
//   as cross_entropy(matmul(h, w, false, true), targets, ignore_index) (ops/cross_entropy.h: the
//   mean over counted rows, NaN when none is counted, ValueError for a target outside [0, V) that
//   is not ignore_index); h and w of one float dtype, on one device.
//
// Forward, for each chunk of `rows` rows of h (the last one shorter), as llm.c does:
//   x     (rows, V) = h_c · wᵀ                    in h's dtype, ONE buffer reused by every chunk
//   the chunk's cross-entropy forward            row losses (summed over chunks), counted rows
//   x     ← σ·(softmax(x) − onehot(t))           in place; 0 on ignored rows (the gradient now)
//   dh_c  (rows, C) = x · w                      f32, rows of dh (N, C)
//   dw    (V, C)   += xᵀ · h_c                   f32, over the chunks
// so no (N, V) tensor ever exists: the extra memory is one chunk of logits plus dh (N, C) and
// dw (V, C) in f32, saved until backward. Backward receives dloss () and writes (fresh tensors)
//   dh · dloss / (count · σ) in h's dtype,   dw · dloss / (count · σ) in w's dtype
// each rounded once. Why the gradient can be made before dloss is known: it is linear in dloss,
// so scaling at the end gives the same value; in floating point the unfused path rounds
// dlogits = p·k (k = dloss/count) and its products, this one p and its products then ×k. When k
// and σ are powers of two (a power-of-two count and loss scale) the two are the same rounding
// of the same numbers, bit for bit (on the CPU: tests/ops/test_lm_head_loss.cpp checks it in f32
// and bf16); otherwise they differ by one rounding of the product (≤ 1 ulp of the result's dtype
// per element before the final cast). Why f32 for dh and dw: dw sums over every chunk, and adding
// bf16 partial sums chunk by chunk would round once per chunk (2⁻⁹ relative each, ~ √chunks of
// them) where the unfused product rounds once at the end; dh is made in one chunk but kept in f32
// so that ×k rounds once too. σ keeps f16's gradient off its subnormals: softmax entries of a
// 50k vocabulary are ~2e-5, below f16's smallest normal 6.1e-5, so in f16 σ = 2¹⁵ (|σ·(p − 1)| ≤
// 32768 < 65504, the f16 maximum); in f32 and bf16 (f32's exponent range) σ = 1.
//
// Chunk rows (lm_head_chunk_rows): as many as keep one chunk of logits within 128 MiB (the
// budget), rounded down to a multiple of 256 when at least 256. Why this size: at GPT-2's
// vocabulary (50304) in bf16 it is 1280 rows, so a B 64 × T 1024 batch runs in 52 chunks instead
// of a 6.6 GB logits buffer and its 6.6 GB gradient. Smaller is not better: each chunk's dw product
// reads and writes the f32 (V, C) accumulator (8·V·C bytes) besides reading the chunk (2·rows·V),
// for 2·rows·V·C FLOPs, i.e. rows·C / (4·C + rows) FLOP per byte: 226 at 1280 rows and C 768,
// about an H200's ridge (989 TFLOP/s over 4.8 TB/s ≈ 206), where chunks sized for its 50 MB L2
// (~500 rows, ~108) would make every dw product memory-bound. The multiple of 256 is the CPU
// GEMM's depth block (ops/cpu/sgemm.h), which makes the CPU's chunked dw sum in the same
// blocks and order as the unfused product.
//
// Backends: CPU (ops/cpu/lm_head_loss.cpp) computes in f32 through sgemm with f16/bf16 inputs
// widened and every value the unfused path stores in the low-precision dtype (logits, dlogits)
// rounded to it, so its chunk buffer is f32 (rows, V); CUDA (ops/cuda/lm_head_loss.cu) runs the
// logits product through cuBLAS in h's dtype, one kernel per chunk for the cross-entropy and its
// gradient in place, and the dh / dw products into f32 (cuda::gemm_f32, ops/matmul.h).
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace st::ops {

Tensor lm_head_cross_entropy(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t ignore_index = -100,
                             int64_t chunk_rows = 0);  // 0: lm_head_chunk_rows(V, h's dtype)

// Rows per chunk for a vocabulary of V in `dtype` (see above); ≥ 1.
int64_t lm_head_chunk_rows(int64_t V, DType dtype);
// The chunk budget in bytes (default 128 MiB). For tests that need several chunks of a small
// model; returns the previous value. Process-wide; not for production.
int64_t set_lm_head_chunk_bytes(int64_t bytes);
// σ for a dtype: 2¹⁵ for f16, else 1 (see above).
float lm_head_grad_prescale(DType dtype);

// Backend kernels: h (N, C), w (V, C) contiguous, one float dtype; targets (N) contiguous i32/i64;
// all on one device; rows ≥ 1.
//   fwd writes loss () f32 (the mean) and count () f32 (the counted rows), and when dh / dw are
//       given (f32, (N, C) / (V, C)) the unscaled gradients Σ σ(p − onehot)·w and Σ σ(p − onehot)ᵀ·h
//       (=); throws ValueError for a target outside [0, V) that is not ignore_index.
//   scale writes dst (=, dst's dtype, same shape) = src (f32) · k / σ, k = dloss / count (0 when
//       count is 0) read from device memory (no host sync); dst may be src.
namespace cpu {
void lm_head_loss_fwd(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t ignore_index, int64_t rows,
                      float sigma, Tensor& loss, Tensor& count, Tensor* dh, Tensor* dw);
void lm_head_loss_scale(const Tensor& src, const Tensor& dloss, const Tensor& count, float sigma, Tensor& dst);
}  // namespace cpu
namespace cuda {
void lm_head_loss_fwd(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t ignore_index, int64_t rows,
                      float sigma, Tensor& loss, Tensor& count, Tensor* dh, Tensor* dw);
void lm_head_loss_scale(const Tensor& src, const Tensor& dloss, const Tensor& count, float sigma, Tensor& dst);
}  // namespace cuda

}  // namespace st::ops
