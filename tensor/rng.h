// Random fills driven by Philox (tensor/philox.h). A Generator is just (seed, offset): each draw
// of n elements consumes counters [offset, offset + n), so a run that records (seed, offset) in
// its checkpoint resumes the same stream bit-exactly, on either device.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace st {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }
  // A number for each consumer that derives its counters from a context instead of advancing
  // the offset (dropout sites in training: runtime/nn/dropout_context.h), in the order they take
  // one; not part of the (seed, offset) state.
  uint64_t take_stream() { return streams_++; }

 private:
  uint64_t seed_;
  uint64_t offset_;
  uint64_t streams_ = 0;
};

// In-place fills (not differentiable); any floating dtype; CPU or CUDA (same numbers).
void fill_uniform(Tensor& t, Generator& gen, float lo = 0.f, float hi = 1.f);
void fill_normal(Tensor& t, Generator& gen, float mean = 0.f, float std = 1.f);

namespace cuda {
void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float lo, float hi);
void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std);
}  // namespace cuda

}  // namespace st
