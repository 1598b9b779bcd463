// Host staging for the MPI backend: CUDA tensors travel through host copies (Tensor::to / copy_),
// and f16 / bf16 reductions run in f32 (widened before the call, rounded once after it), which
// is both the accuracy the issue asks for and the simplest correct use of MPI's built-in ops.
#pragma once
#include "tensor/tensor.h"

namespace st::comm::mpi {

// A host tensor with `t`'s shape and dtype: t itself (detached) when it is on the CPU; else a copy
// of its values (copy_in) or uninitialised host memory.
Tensor host_view(const Tensor& t, bool copy_in);
// Writes host values back into `dst` when dst is a CUDA tensor (no-op when host is dst's memory).
void unstage(const Tensor& host, const Tensor& dst);

bool is_half(DType t);  // f16 or bf16
// f16 / bf16 host tensor (n) → f32 tensor (n), exact.
Tensor widen_f32(const Tensor& host);
// f32 (n) / divisor → `host_out` (n) of f16 / bf16, rounded to nearest even once.
void narrow_from_f32(const Tensor& wide, const Tensor& host_out, double divisor);
// In place: t /= divisor (f32 only; avg of non-half floats).
void divide_f32(const Tensor& t, double divisor);

}  // namespace st::comm::mpi
