// Matrix products.
//   matmul(a, b, ta, tb): op(a) (..., M, K) · op(b) (..., K, N) → (..., M, N), op = transpose
//     when the flag is set. Batch dims of a and b must match; a 2-D b is shared by every batch
//     (then a must not be transposed: the batch folds into M).
//   linear(x, w, bias): x (..., C_in) · w (C_in, C_out) + bias (C_out) → (..., C_out).
//     w is stored (in, out) like GPT-2's Conv1D, so HF weights load without transposes.
//   linear_nt(x, w, bias): x (..., C_in) · wᵀ + bias → (..., C_out), w (C_out, C_in) stored as
//     torch.nn.Linear stores it (Llama's checkpoints); the bias added after the product.
// CPU: ops/cpu/sgemm (Eigen's GEBP kernel, fixed blocking) in f32 (f16/bf16 widened, rounded
// on store). CUDA: cuBLAS with f32 accumulation (f32 inputs exact unless TF32 is switched on:
// set_gemm_allow_tf32); for f16/bf16 with a bias, linear adds the bias in the GEMM's epilogue and its
// backward computes the bias gradient in the weight-gradient GEMM (cuBLASLt, gemm_lt), falling
// back to a separate add / column sum where cuBLASLt has no kernel. Backward writes fresh
// tensors (=).
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
Tensor linear_nt(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

namespace cpu {
// c (batch, M, N) = op(a) · op(b); a, b contiguous with `batch` leading matrices (b_batch 1 = shared).
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
          int64_t K, bool b_shared);
}  // namespace cpu
namespace cuda {
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
          int64_t K, bool b_shared);
// c (M, N) f32 = op(a)·op(b), or += when accumulate: a and b of one float dtype (f16/bf16 products
// keep cuBLAS's f32 accumulator, never rounded to the inputs' dtype; f32 follows
// set_gemm_allow_tf32); a, b, c contiguous. For sums over several products (ops/lm_head_loss.h).
void gemm_f32(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              bool accumulate);
// One f16/bf16 GEMM c (M, N) = op(a) · op(b) with a fused epilogue (ops/cuda/gemm_lt.cu):
//   bias:        c += bias (N)
//   gelu_bias:   aux (M, N) = a·b + bias, c = gelu_tanh(aux)
//   bgrad_b:     bias_grad (N) = column sums of b (K, N) (needs !tb)
// Returns false, leaving every output untouched, when cuBLASLt has no kernel for the case.
enum class LtEpilogue { bias, gelu_bias, bgrad_b };
bool gemm_lt(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
             LtEpilogue ep, const Tensor& bias, const Tensor& aux, const Tensor& bias_grad);
int64_t gemm_lt_launches(LtEpilogue ep);  // fused GEMMs run so far, per epilogue (tests, benches)
// f32 products: exact f32 (CUBLAS_COMPUTE_32F) by default; on, they run on TF32 tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to a 10-bit mantissa, f32 accumulation), as
// PyTorch's set_float32_matmul_precision('high'). Process-wide (the trainer sets it from --tf32).
// f16/bf16 products (and every cuBLASLt epilogue GEMM, which is f16/bf16 only) are unaffected. A
// CPU-only build ignores it: the CPU's f32 GEMM is always exact.
void set_gemm_allow_tf32(bool on);
bool gemm_allow_tf32();
}  // namespace cuda

}  // namespace st::ops
