// Inverted dropout driven by the counter-based RNG (tensor/philox.h), so the mask is a pure
// function of (seed, offset) and identical on CPU and GPU:
//   element i of x (any shape, row-major) is dropped iff philox_uniform_lane(seed, offset + i) < p
//   (lane (offset + i) mod 4 of Philox block (offset + i) / 4: one evaluation per four elements),
//   kept elements are scaled by 1/(1 − p);  x (...) → y (...).
// A training call with 0 < p reserves numel counters (gen.advance(numel)); when !training or
// p == 0 it returns x itself and draws nothing; p == 1 drops everything (y = 0).
// The mask is never stored: backward regenerates it from (seed, offset) and applies the same
// kernel to the incoming gradient (dx = mask·scale·dy), writing a fresh tensor (=).
#pragma once
#include <cstdint>

#include "tensor/rng.h"
#include "tensor/tensor.h"

namespace st::ops {

Tensor dropout(const Tensor& x, float p, Generator& gen, bool training);
// The same with explicit counters (element i uses philox(seed, offset + i)); draws nothing.
Tensor dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, bool training);

// The same with the seed held in a one-element i64 tensor on x's device, read when the mask is
// made (forward and backward) rather than when the call is made: a step captured as a CUDA graph
// takes its seeds from device memory that the host rewrites before each replay
// (runtime/nn/dropout_context.h). Same masks as the overload above for the same seed value.
Tensor dropout(const Tensor& x, float p, const Tensor& seed, uint64_t offset, bool training);

// y = x·mask(seed, offset)/(1 − p); x, y contiguous, one dtype; also the backward (x = dy, y = dx).
namespace cpu {
void dropout_fwd(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y);  // x (n) → y (n)
}  // namespace cpu
namespace cuda {
void dropout_fwd(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y);
// seed: a device pointer read by the kernel
void dropout_fwd_seed_at(const Tensor& x, float p, const uint64_t* seed, uint64_t offset, Tensor& y);
}  // namespace cuda

}  // namespace st::ops
