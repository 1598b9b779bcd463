// Embedding lookup: weight (V, C), idx (...) i32/i64 → (..., C), row idx[i] of weight.
// An index outside [0, V) → ValueError naming the index, its position and V.
// Backward is a scatter-add into a fresh dW (V, C) (=, zero where no index points), done in
// index order so that repeated indices always sum the same way (deterministic). idx gets no
// gradient. CPU accumulates in f32 and rounds once into weight's dtype.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

Tensor embedding(const Tensor& weight, const Tensor& idx);

// Backend kernels: weight (V, C), out / dout (N, C) of weight's dtype, idx (N) i32/i64, all
// contiguous on one device. fwd validates the indices (CUDA: raise ValueError after the kernel
// reports an out-of-range index). bwd overwrites dweight (V, C).
namespace cpu {
void embedding_fwd(const Tensor& weight, const Tensor& idx, Tensor& out);
void embedding_bwd(const Tensor& idx, const Tensor& dout, Tensor& dweight);
}  // namespace cpu
namespace cuda {
void embedding_fwd(const Tensor& weight, const Tensor& idx, Tensor& out);
void embedding_bwd(const Tensor& idx, const Tensor& dout, Tensor& dweight);
}  // namespace cuda

}  // namespace st::ops
