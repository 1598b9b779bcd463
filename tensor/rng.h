// Random fills driven by Philox (tensor/philox.h).
//
// Streams: a Generator is just (seed, offset): each draw of n elements consumes counters
// [offset, offset + n), so a run that records (seed, offset) in its checkpoint resumes the same
// stream bit-exactly, on either device.
//
// Keyed fills: a tensor named in a larger whole (a model parameter by its full name) draws from
// its own stream, key = stream_key(seed, name), and element j of the FULL tensor takes counter j.
// Its values then depend only on (seed, name, j) — not on which tensors were filled before it,
// nor on the rank, stage or shard filling it: a pipeline stage fills only its layers and a
// tensor-parallel shard only its slice (an ElementMap, tensor/element_map.h), and every layout
// starts from the same numbers as one process.
#pragma once
#include <cstdint>
#include <string_view>

#include "tensor/element_map.h"
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

 private:
  uint64_t seed_;
  uint64_t offset_;
};

// In-place fills (not differentiable); any floating dtype; CPU or CUDA (same numbers).
void fill_uniform(Tensor& t, Generator& gen, float lo = 0.f, float hi = 1.f);
void fill_normal(Tensor& t, Generator& gen, float mean = 0.f, float std = 1.f);

// The key of the stream named `name` under `seed` (FNV-1a of the name, mixed with the seed by
// splitmix64 steps): distinct names give unrelated streams.
uint64_t stream_key(uint64_t seed, std::string_view name);
// t's element i ← mean + std · normal(key, map.full_index(i)); 0 where the map says padding.
// t contiguous, any floating dtype, CPU or CUDA (the same numbers). map.numel() == t.numel().
void fill_normal_keyed(Tensor& t, uint64_t key, float mean, float std, const ElementMap& map);

namespace cuda {
void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float lo, float hi);
void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std);
void fill_normal_keyed(Tensor& t, uint64_t key, float mean, float std, const ElementMap& map);
}  // namespace cuda

}  // namespace st
