// The few per-device primitives the tensor core itself needs (copies with casts and strides,
// fill, accumulate). CPU versions live in tensor/cpu, CUDA versions in tensor/cuda; CPU-only
// builds compile tensor/cuda_stub instead, whose functions throw DeviceError.
#pragma once
#include <vector>

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
// Pieces of device memory packed into one device block, in one kernel launch on the current
// stream (tensor/cuda/pack_bytes.cu): piece k's `bytes` bytes from `src` to dst + offset. The
// pieces must not overlap in dst; a piece's source may be freed (to the stream-ordered cache)
// once this returns.
struct BytePiece {
  const void* src;
  size_t offset;
  size_t bytes;
};
void pack_bytes(void* dst, const std::vector<BytePiece>& pieces);
}  // namespace cuda
}  // namespace st
