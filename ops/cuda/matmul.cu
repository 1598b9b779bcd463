// CUDA GEMM through cuBLAS (which dispatches to cuBLASLt kernels on Hopper): strided batched,
// f32 exact by default (TF32 opt-in: set_gemm_allow_tf32, ops/matmul.h), f16/bf16 in and out with f32 accumulation.
// One cuBLAS handle per (device, stream), created at first use, with the stream's 32 MiB GEMM
// workspace (cublas_common.h; cuBLASLt uses the same one), so concurrent streams never share one.
//
// Row-major c (batch, M, N) = op(a) · op(b) is computed as the column-major product
// cᵀ (N, M) = op(b)ᵀ · op(a)ᵀ, i.e. cuBLAS with A = b, B = a and no data movement.
// A 2-D b shared by every batch with an untransposed a folds the batch into M (one GEMM).
#include <cublas_v2.h>

#include <atomic>
#include <map>
#include <mutex>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cublas_common.h"
#include "ops/matmul.h"

namespace st::ops::cuda {
namespace {

std::atomic<bool> g_tf32{false};  // f32 GEMMs on TF32 tensor cores (off: exact)

// launchers

cublasHandle_t handle_for(cudaStream_t stream) {
  static std::mutex mu;
  static auto* handles = new std::map<std::pair<int, cudaStream_t>, cublasHandle_t>();  // leaked: outlives statics
  int device = st::cuda::current_device();
  void* workspace = gemm_workspace(stream);
  std::lock_guard<std::mutex> lock(mu);
  cublasHandle_t& h = (*handles)[{device, stream}];
  if (!h) {
    CHECK_CUBLAS(cublasCreate(&h));
    CHECK_CUBLAS(cublasSetStream(h, stream));
    CHECK_CUBLAS(cublasSetWorkspace(h, workspace, kGemmWorkspaceBytes));
  }
  return h;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  ST_THROW(DTypeError, "matmul: CUDA GEMM needs f32/f16/bf16, got " << dtype_name(t));
}

}  // namespace

void* gemm_workspace(cudaStream_t stream) {
  static std::mutex mu;
  static auto* spaces = new std::map<std::pair<int, cudaStream_t>, void*>();  // leaked: outlives statics
  std::lock_guard<std::mutex> lock(mu);
  void*& ws = (*spaces)[{st::cuda::current_device(), stream}];
  if (!ws) CHECK_CUDA(cudaMalloc(&ws, kGemmWorkspaceBytes));
  return ws;
}

void set_gemm_allow_tf32(bool on) { g_tf32 = on; }
bool gemm_allow_tf32() { return g_tf32; }

// a (batch, M, K) or (batch, K, M) when ta; b (batch|1, K, N) or (batch|1, N, K) when tb;
// c (batch, M, N) overwritten (=).
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
          int64_t K, bool b_shared) {
  check_contiguous_cuda("matmul", {&a, &b, &c});
  if (a.dtype() != b.dtype() || a.dtype() != c.dtype())
    ST_THROW(DTypeError, "matmul: CUDA GEMM operands " << a.describe() << ", " << b.describe() << " → " << c.describe());
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {
    c.fill_(0.0);
    return;
  }
  if (b_shared && !ta && batch > 1) {  // fold the batch into M
    M *= batch;
    batch = 1;
  }
  cudaDataType_t t = cuda_type(a.dtype());
  cublasComputeType_t compute =
      (a.dtype() == DType::f32 && gemm_allow_tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasHandle_t h = handle_for(current_stream());
  const float alpha = 1.f, beta = 0.f;
  cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t lda = tb ? K : N, ldb = ta ? M : K, ldc = N;
  const long long strideA = b_shared ? 0 : K * N, strideB = M * K, strideC = M * N;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || batch > INT32_MAX)
    ST_THROW(ShapeError, "matmul: CUDA GEMM dims exceed 2^31 (M " << M << ", N " << N << ", K " << K << ")");
  CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, opA, opB, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K),
                                          &alpha, b.data_ptr(), t, static_cast<int>(lda), strideA, a.data_ptr(), t,
                                          static_cast<int>(ldb), strideB, &beta, c.data_ptr(), t,
                                          static_cast<int>(ldc), strideC, static_cast<int>(batch), compute,
                                          CUBLAS_GEMM_DEFAULT));
}

// a (M, K) or (K, M) when ta; b (K, N) or (N, K) when tb, one float dtype; c (M, N) f32 (= or +=).
void gemm_f32(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              bool accumulate) {
  check_contiguous_cuda("matmul", {&a, &b, &c});
  if (a.dtype() != b.dtype() || c.dtype() != DType::f32)
    ST_THROW(DTypeError, "matmul: CUDA f32-out GEMM operands " << a.describe() << ", " << b.describe() << " → "
                                                                << c.describe());
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) c.fill_(0.0);
    return;
  }
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    ST_THROW(ShapeError, "matmul: CUDA GEMM dims exceed 2^31 (M " << M << ", N " << N << ", K " << K << ")");
  cudaDataType_t t = cuda_type(a.dtype());
  cublasComputeType_t compute =
      (a.dtype() == DType::f32 && gemm_allow_tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  // row-major c = op(a)·op(b) as column-major cᵀ = op(b)ᵀ·op(a)ᵀ (see the top of the file)
  cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t lda = tb ? K : N, ldb = ta ? M : K, ldc = N;
  CHECK_CUBLAS(cublasGemmEx(handle_for(current_stream()), opA, opB, static_cast<int>(N), static_cast<int>(M),
                            static_cast<int>(K), &alpha, b.data_ptr(), t, static_cast<int>(lda), a.data_ptr(), t,
                            static_cast<int>(ldb), &beta, c.data_ptr(), CUDA_R_32F, static_cast<int>(ldc), compute,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace st::ops::cuda
