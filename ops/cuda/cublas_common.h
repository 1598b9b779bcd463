// What the two GEMM paths share — ops/cuda/matmul.cu (cuBLAS) and ops/cuda/gemm_lt.cu (cuBLASLt):
// the status check and one 32 MiB workspace per (device, stream). Both libraries may use the same
// workspace because their kernels on one stream run in order.
#pragma once
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "tensor/error.h"

namespace st::ops::cuda {

inline bool cublas_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline const char* cublas_describe(cublasStatus_t s) { return cublasGetStatusString(s); }
#define CHECK_CUBLAS(expr) ST_CHECK_GEN(expr, ::st::ops::cuda::cublas_ok, ::st::ops::cuda::cublas_describe, ::st::CudaError)

constexpr size_t kGemmWorkspaceBytes = 32u << 20;

// The workspace of the current device and `stream`, allocated at first use and kept (matmul.cu).
void* gemm_workspace(cudaStream_t stream);

}  // namespace st::ops::cuda
