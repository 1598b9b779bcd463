// Tensor-core causal attention (ops/cuda/attention_tc.cu) for f16/bf16 with head dim 64, used by
// ops/cuda/attention.cu when it applies; other dtypes and head dims take the CUDA-core kernels.
// Shapes as in ops/attention.h: q, k, v, out, dout, dq, dk, dv (BH, T, 64); lse, delta (BH, T) f32.
#pragma once
#include <cuda_runtime.h>

#include "tensor/tensor.h"

namespace st::ops::cuda {
bool attention_tc_supported(const Tensor& q);
void attention_fwd_tc(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, cudaStream_t s);
// delta (BH, T) = rowsum(dout ∘ out), computed by the caller
void attention_bwd_tc(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, const Tensor& delta,
                      const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, cudaStream_t s);
}  // namespace st::ops::cuda
