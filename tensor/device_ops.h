// The few per-device primitives the tensor core itself needs (copies with casts and strides,
// fill, accumulate). CPU versions live in tensor/cpu, CUDA versions in tensor/cuda; CPU-only
// builds compile tensor/cuda_stub instead, whose functions throw DeviceError.
#pragma once
#include "tensor/tensor.h"

namespace st {
namespace cpu {
void copy(const Tensor& dst, const Tensor& src);  // both on the CPU; any dtypes and strides
void fill(const Tensor& dst, double value);       // any strides
void add(const Tensor& dst, const Tensor& src, double alpha);  // dst += alpha·src
}  // namespace cpu
namespace cuda {
// dst and src on the GPU (any dtypes, strides), or one on the host: then both contiguous and of
// one dtype (Tensor::copy_ arranges that). Ordered on the current stream.
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void add(const Tensor& dst, const Tensor& src, double alpha);
}  // namespace cuda
}  // namespace st
