// The sequence sharding of the context-parallel axis (issue 34): which tokens a cp rank holds and
// at which global positions, as ops/ring_schedule.h lays them out — the sequence of T tokens cut
// into 2N chunks of C = T / (2N), rank r holding two of them concatenated in LOCAL order
// (load_balanced: chunks r and 2N − 1 − r; contiguous: 2r and 2r + 1). ring_attention
// (runtime/parallel/ring_attention.h) takes its q, k, v in that order; rotary or learned
// positions must use the global index of each local row (context_positions), not the local one.
// Each chunk is a contiguous run of positions, so a rotation by offset (ops/rope.h) applies per
// chunk with offsets positions[0] and positions[C].
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "ops/ring_schedule.h"
#include "tensor/tensor.h"

namespace st::runtime {

using CpGroup = std::shared_ptr<comm::Communicator>;

// The global positions of rank `rank`'s 2C local tokens, in local order; ValueError unless 2N
// divides T (ops::context_chunk_len) and 0 ≤ rank < ranks.
std::vector<int64_t> context_positions(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split);
// The same as a (2C) i64 tensor on `device` (to index a learned position table or a rope table).
Tensor context_position_ids(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split,
                            Device device = Device::cpu);
// context_position_ids kept for the last (seq_len, device) asked: a layer calls it every forward
// with the same length, and building it copies to the device each time.
class ContextPositionCache {
 public:
  const Tensor& get(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split, Device device);

 private:
  Tensor ids_;
  int64_t seq_len_ = -1, ranks_ = -1, rank_ = -1;
  ops::ContextSplit split_ = ops::ContextSplit::load_balanced;
};

// x (..., T, ...) with the sequence at `dim` → (..., 2C, ...): rank `rank`'s two chunks
// concatenated in local order (a fresh tensor; differentiable: narrow + cat, so the gradient of a
// shard flows back to the whole). Any dtype (token ids too). ShapeError unless 2N divides T.
Tensor shard_sequence(const Tensor& x, int64_t ranks, int64_t rank, ops::ContextSplit split, int64_t dim = 1);

// The inverse on one process: parts[r] (..., 2C, ...) = rank r's shard, r < N = parts.size() →
// (..., T, ...) in global order (fresh, no autograd). ShapeError unless the parts agree.
Tensor unshard_sequence(const std::vector<Tensor>& parts, ops::ContextSplit split, int64_t dim = 1);

// The inverse over the cp group: every rank's x (..., 2C, ...) all-gathered and put back in global
// order, (..., T, ...) on every rank (one all_gather; no autograd; for tests and reports). A null
// group or a group of one returns a contiguous copy of x.
Tensor gather_sequence(const Tensor& x, const CpGroup& cp, ops::ContextSplit split, int64_t dim = 1);

}  // namespace st::runtime
