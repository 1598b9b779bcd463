// ElementMap: where the elements of a tensor sit in a larger "full" tensor, so that a keyed
// random fill (tensor/rng.h) gives each element the number of its position in the full tensor —
// a tensor-parallel shard then draws exactly its part of the full tensor without materialising
// the rest.
//
// The local tensor is seen as (outer, local, inner) and the full one as (outer, full, inner):
// position l of the local middle dim is full position ranges[0] ++ ranges[1] ++ … (each range
// `length[k]` consecutive full positions from `start[k]`); a local position past the ranges'
// total is padding (a vocabulary padded to a multiple of tp) and has no full index.
// Header-only and usable from CUDA device code (the map is passed to a kernel by value).
#pragma once
#include <cstdint>

#include "tensor/philox.h"

namespace st {

struct ElementMap {
  static constexpr int kMaxRanges = 8;
  int64_t outer = 1, local = 0, inner = 1, full = 0;
  int ranges = 0;
  int64_t start[kMaxRanges] = {}, length[kMaxRanges] = {};
  int64_t first = 0, count = -1;  // the window: local elements [first, first + count); count −1: all

  // The identity map of a tensor of n elements.
  static ElementMap whole(int64_t n) {
    ElementMap m;
    m.local = m.full = n;
    m.ranges = 1;
    m.start[0] = 0;
    m.length[0] = n;
    return m;
  }
  // Local elements [lo, lo + n) of this map's elements (of its window, when it has one).
  ElementMap window(int64_t lo, int64_t n) const {
    ElementMap m = *this;
    m.first = first + lo;
    m.count = n;
    return m;
  }
  int64_t numel() const { return count >= 0 ? count : outer * local * inner; }
  int64_t full_numel() const { return outer * full * inner; }

  // Element i (row-major, of the window) → its index in the full tensor, or −1 for padding.
  ST_HOST_DEVICE int64_t full_index(int64_t i) const {
    i += first;
    const int64_t o = i / (local * inner), rem = i % (local * inner);
    const int64_t l = rem / inner, in = rem % inner;
    int64_t acc = 0;
    for (int k = 0; k < ranges; ++k) {
      if (l < acc + length[k]) return (o * full + start[k] + (l - acc)) * inner + in;
      acc += length[k];
    }
    return -1;
  }
};

}  // namespace st
