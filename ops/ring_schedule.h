// Which attention blocks each rank of a context-parallel ring computes (issue 34), as pure
// functions of (ranks N, rank r, step s): no communicator, no tensors.
// The sequence of T tokens is cut into 2N chunks of C = T / (2N); every rank holds two of them
// (its queries and its keys/values), in local order:
//   load_balanced  rank r holds chunks r and 2N − 1 − r: one from each end, so under the causal
//                  mask every rank sees the same number of (query, key) scores;
//   contiguous     rank r holds chunks 2r and 2r + 1 (the naive split: the last rank does ~N×
//                  the first's work; kept so the balance test has something to fail against).
// At ring step s (0 ≤ s < N) rank r holds the key/value chunks of rank (r − s) mod N (step 0:
// its own). Each of the 2 × 2 (query chunk, key chunk) pairs is
//   causal   q chunk = k chunk: the diagonal block (BlockMask::causal),
//   full     k chunk < q chunk: every key precedes every query (BlockMask::full),
//   skipped  k chunk > q chunk: every key is in the future.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/block_attention.h"

namespace st::ops {

enum class ContextSplit { load_balanced, contiguous };
enum class RingPair { causal, full, skipped };

struct RingBlock {
  int q_slot, k_slot;        // 0 or 1: which of the local query chunks / received key chunks
  int64_t q_chunk, k_chunk;  // their global chunk indices, in [0, 2N)
  RingPair kind;
};

// C = T / (2N); ValueError unless N ≥ 1, T > 0 and 2N divides T
int64_t context_chunk_len(int64_t seq_len, int64_t ranks);
// the two global chunks rank r holds, in local order; ValueError unless 0 ≤ r < N
std::vector<int64_t> context_chunks(int64_t ranks, int64_t rank, ContextSplit split);
// the rank whose key/value chunks rank r holds at step s: (r − s) mod N
int64_t ring_source(int64_t ranks, int64_t rank, int64_t step);
// the 4 pairs of rank r at step s, q_slot-major (skipped ones included)
std::vector<RingBlock> ring_step_blocks(int64_t ranks, int64_t rank, int64_t step, ContextSplit split);
// the mask a non-skipped pair runs with (ValueError for a skipped one)
BlockMask ring_block_mask(RingPair kind);
// score elements rank r computes at step s, counting visible ones only: C(C + 1)/2 per causal
// block, C² per full block (the work a flash kernel that skips masked tiles does, to O(C))
int64_t ring_step_scores(int64_t ranks, int64_t rank, int64_t step, int64_t chunk_len, ContextSplit split);

}  // namespace st::ops
