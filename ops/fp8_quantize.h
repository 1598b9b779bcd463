// Casts to and from FP8 with a per-tensor scale (ops/fp8_scaling.h), on the CPU and on CUDA with
// the same bits: the cast multiplies by s in f32 and rounds to FP8 to nearest even, saturating
// (tensor/dtype.h on the CPU; cvt.rn.satfinite on the GPU, checked against it by
// tests/gpu/test_gpu_fp8.cpp).
//
//   fp8_quantize(x, scaling, transpose)
//     x (..., C) f32 / f16 / bf16, seen as (R, C) with R = numel / C
//     → data (..., C) fp8 = fp8(x · s)
//       data_t (C, R) fp8 = dataᵀ, when `transpose` (Hopper's FP8 GEMMs take both operands with
//                the contracted dim contiguous, so a tensor used on both sides of a product needs
//                both layouts: ops/fp8_matmul.h)
//       scale_inv (1) f32 = s⁻¹ as it was at the cast (a copy: a later update does not change the
//                meaning of data)
//     current scaling first sets amax ← max |x| and s from it; delayed scaling uses the state's s and
//     max-accumulates max |x| into the state's amax in the same pass. Not differentiable.
//     counts (2) i64 on x's device, when defined: += [overflow, underflow] of this cast, the
//     elements whose x·s the cast saturated / rounded to zero (ops/fp8_scaling.h, "overflow and
//     underflow"), counted by the cast kernel itself as it converts (no pass of its own).
//     column_sums (C) f32, when asked: Σ over the R rows of x, computed as the cast reads x (the
//                bias gradient of fp8_linear's backward, which otherwise reads dy once more), in
//                one order on both devices so that they agree bit for bit: rows in chunks of 8,
//                chunks in tiles of 32 (the CUDA transposing cast's 256-row tile), each sum from 0
//                in row order — Σ_tiles (Σ_chunks (Σ_rows x)); the last chunk and tile may be short.
//   fp8_quantize_act(act, pre, dy, scaling, counts, column_sums)
//     the transposing cast (data and data_t) of an MLP activation or its gradient x, each value
//     rounded to pre's dtype as the activation's own op rounds it: the bits of
//     fp8_quantize(x, scaling, true, counts, column_sums) with
//       gelu         x (..., C)  = ops::gelu(pre),                pre (..., C)
//       gelu_grad    x (..., C)  = gelu's input gradient for dy,  pre, dy (..., C)
//       swiglu       x (..., F)  = ops::swiglu(pre),              pre = [gate | up] (..., 2F)
//       swiglu_grad  x (..., 2F) = swiglu's input gradient for dy, pre (..., 2F), dy (..., F)
//     With delayed scaling on CUDA the cast computes x as it reads pre (and dy), so x is never
//     written (the fused MLP, ops/fp8_mlp.h); current scaling (its amax pass would need x first),
//     the CPU and the shapes the packed kernel does not take compute x, then cast it (dy, taken by
//     value, is let go first: a caller that moves it in holds x and its cast, not dy as well).
//     pre, dy f32 / f16 / bf16 of one dtype.
//   fp8_dequantize(q, dtype)    data · scale_inv → (..., C) of `dtype` (f32 exact)
//   fp8_amax(x)                 (1) f32: max |x| (NaN if any element is NaN)
#pragma once
#include "ops/fp8_scaling.h"
#include "tensor/tensor.h"

namespace st::ops {

struct Fp8Tensor {
  Tensor data;       // (..., C) f8e4m3 / f8e5m2
  Tensor data_t;     // (C, R) the transpose, or undefined
  Tensor scale_inv;  // (1) f32 s⁻¹, on data's device
  Tensor column_sums;  // (C) f32 Σ over the rows, or undefined (fp8_quantize's column_sums)
};

// The order of fp8_quantize's column sums: rows a chunk, chunks a tile.
constexpr int64_t kFp8SumChunkRows = 8, kFp8SumTileChunks = 32;

// One column's sum over rows [0, R) in that order, at(r) being row r's value as a float: the CPU's
// and CUDA's one-thread-a-column kernel's (the transposing cast's tiles add the same way in
// ops/cuda/fp8_cast.cu). Additions only, so no contraction can change the bits.
template <class At>
ST_HOST_DEVICE inline float fp8_column_sum(int64_t R, const At& at) {
  constexpr int64_t tile_rows = kFp8SumChunkRows * kFp8SumTileChunks;
  float total = 0.f;
  for (int64_t t0 = 0; t0 < R; t0 += tile_rows) {
    const int64_t t1 = t0 + tile_rows < R ? t0 + tile_rows : R;
    float tile = 0.f;
    for (int64_t c0 = t0; c0 < t1; c0 += kFp8SumChunkRows) {
      const int64_t c1 = c0 + kFp8SumChunkRows < t1 ? c0 + kFp8SumChunkRows : t1;
      float chunk = 0.f;
      for (int64_t r = c0; r < c1; ++r) chunk += at(r);
      tile += chunk;
    }
    total += tile;
  }
  return total;
}

Fp8Tensor fp8_quantize(const Tensor& x, Fp8Scaling& scaling, bool transpose = false, const Tensor& counts = Tensor(),
                       bool column_sums = false);
enum class Fp8Act { gelu, gelu_grad, swiglu, swiglu_grad };
constexpr bool fp8_act_is_grad(Fp8Act a) { return a == Fp8Act::gelu_grad || a == Fp8Act::swiglu_grad; }  // reads dy
constexpr bool fp8_act_is_swiglu(Fp8Act a) { return a == Fp8Act::swiglu || a == Fp8Act::swiglu_grad; }   // pre (..., 2F)
Fp8Tensor fp8_quantize_act(Fp8Act act, const Tensor& pre, Tensor dy, Fp8Scaling& scaling,
                           const Tensor& counts = Tensor(), bool column_sums = false);
Tensor fp8_dequantize(const Fp8Tensor& q, DType dtype = DType::f32);
Tensor fp8_amax(const Tensor& x);

namespace cpu {
// *amax = max(*amax, max |x|) by bits (ops/fp8_scaling.h); x contiguous f32/f16/bf16
void fp8_amax(const Tensor& x, float* amax);
// s from state[amax] (current scaling)
void fp8_scale_current(float* state, const Fp8ScalingOptions& options);
// x (R, C) contiguous → q (R, C) and, when qt is defined, qt (C, R); s = state[0]; record: state[2]
// max-accumulates max |x|; *scale_inv = state[1]; counts (2), when not null: += [overflow, underflow]
void fp8_cast(const Tensor& x, Tensor& q, Tensor& qt, float* state, bool record, float* scale_inv,
              int64_t* counts = nullptr, float* column_sums = nullptr);
// out (n) = f32(q) · *scale_inv rounded to out's dtype
void fp8_dequantize(const Tensor& q, const float* scale_inv, Tensor& out);
}  // namespace cpu
namespace cuda {
void fp8_amax(const Tensor& x, float* amax);
void fp8_scale_current(float* state, const Fp8ScalingOptions& options);
// counts: as the CPU's, added with one atomic per block and counter (none for a zero);
// column_sums (C), when not null: the CPU's bits (the transposing cast's tiles sum their columns)
void fp8_cast(const Tensor& x, Tensor& q, Tensor& qt, float* state, bool record, float* scale_inv,
              int64_t* counts = nullptr, float* column_sums = nullptr);
void fp8_dequantize(const Tensor& q, const float* scale_inv, Tensor& out);
// fp8_cast of x = act(pre[, dy]) (R, C) into q (R, C) and qt (C, R), computed as the packed
// transposing cast reads pre and dy (2D, contiguous, one dtype; shapes as fp8_quantize_act's);
// false, launching nothing, where that kernel does not take the shape or alignment (the caller
// computes x and casts it)
bool fp8_cast_act(Fp8Act act, const Tensor& pre, const Tensor& dy, Tensor& q, Tensor& qt, float* state, bool record,
                  float* scale_inv, int64_t* counts = nullptr, float* column_sums = nullptr);
// *amax = 0 (on the stream; before a current-scaling amax pass)
void fp8_zero(float* p);
}  // namespace cuda

}  // namespace st::ops
