// Options of the CUDA GEMM (ops/cuda/matmul.cu). f32 products are exact-f32 by default
// (CUBLAS_COMPUTE_32F); TF32 tensor cores are opt-in, by set_gemm_allow_tf32(true) or the
// environment variable ST_ALLOW_TF32=1 read at first use. f16/bf16 always accumulate in f32.
#pragma once

namespace st::ops::cuda {
void set_gemm_allow_tf32(bool on);
bool gemm_allow_tf32();
}  // namespace st::ops::cuda
