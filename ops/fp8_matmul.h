// The FP8 matrix product, in the one layout Hopper's FP8 tensor-core GEMMs take: both operands
// with the contracted dim contiguous (cuBLASLt's "TN": A transposed, B not; cublasLtMatmul's FP8
// requirements). A row-major product that needs another layout takes the operand's transposed
// FP8 copy, made in the same pass as its cast (ops/fp8_quantize.h, `transpose`).
//
//   fp8_matmul(a, a_scale_inv, b, b_scale_inv, out_dtype, amax, bias, accum)
//     a (M, K) fp8 · b (N, K)ᵀ fp8 (+ bias (N)) → c (M, N) out_dtype (f32, bf16, f16)
//     c = (a_scale_inv · b_scale_inv) · Σ_k f32(a[m,k]) · f32(b[n,k]) + f32(bias[n]), rounded once
//     bias (optional): taken in out_dtype (cuBLASLt's bias type for a bf16 / f16 D), added in f32
//     by the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS), not by a pass over c
//     a_scale_inv, b_scale_inv: (1) f32 on the operands' device (the s⁻¹ of their casts)
//     formats: e4m3 · e4m3, e4m3 · e5m2, e5m2 · e4m3 (cuBLASLt has no e5m2 · e5m2 kernel on Hopper)
//     amax (optional, (1) f32): max-accumulates max |c| (by bits, ops/fp8_scaling.h)
//     accum: Fp8Accum::promoted (default) or fast — how the tensor cores' partial sums are kept on
//       CUDA (below); the CPU's sum is the same f32 sum for both
//
// CPU: the emulation — decode both operands to f32 exactly, one sgemm (ops/cpu/sgemm.h: every
// product of two FP8 values is exact in f32, so only the order of the f32 sums is the CPU's own),
// then c · (a_scale_inv · b_scale_inv) + bias, rounded once to out_dtype.
// CUDA: cublasLtMatmul with CUDA_R_8F_E4M3 / E5M2 operands, CUBLAS_COMPUTE_32F, the two s⁻¹ as
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER (device pointers: a CUDA graph reads them at replay),
// CUBLASLT_MATMUL_DESC_FAST_ACCUM off for `promoted` (the tensor cores' partial sums promoted to
// f32 registers every few k-blocks: the f32 sum's error) and on for `fast` (the partial sums stay
// in the tensor cores' accumulator, whose additions keep fewer mantissa bits than f32: Transformer
// Engine's choice for the forward product, whose K is one layer's width; its gradients keep
// promoted sums), D = C in out_dtype. cuBLASLt computes
// AMAX_D only for FP8 outputs, so the amax of a f32 / bf16 / f16 c is a separate reduction over c.
// Where cuBLASLt has no kernel for a shape (dims not multiples of 16, odd alignment), the same
// product runs as a bf16 GEMM with f32 accumulation (every FP8 value is a bf16 value, so the
// operands are exact) followed by the scaling: slower, same function.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

enum class Fp8Accum { promoted, fast };

Tensor fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                  DType out_dtype = DType::bf16, const Tensor& amax = Tensor(), const Tensor& bias = Tensor(),
                  Fp8Accum accum = Fp8Accum::promoted);

namespace cpu {
// a (M, K), b (N, K) fp8 contiguous; c (M, N) contiguous f32/bf16/f16, overwritten; bias (N) of c's
// dtype, contiguous, or undefined
void fp8_gemm(const Tensor& a, const float* a_scale_inv, const Tensor& b, const float* b_scale_inv, Tensor& c,
              const Tensor& bias = Tensor());
}  // namespace cpu
namespace cuda {
void fp8_gemm(const Tensor& a, const float* a_scale_inv, const Tensor& b, const float* b_scale_inv, Tensor& c,
              const Tensor& bias = Tensor(), Fp8Accum accum = Fp8Accum::promoted);
int64_t fp8_gemm_lt_launches();  // FP8 GEMMs cuBLASLt ran so far (tests: the fast path is taken)
}  // namespace cuda

}  // namespace st::ops
