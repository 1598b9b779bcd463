// The context-parallel ring's block schedule (ops/ring_schedule.h): pure integer functions.
#include "ops/ring_schedule.h"

#include "tensor/error.h"

namespace st::ops {
namespace {
void check_rank(const char* name, int64_t ranks, int64_t rank) {
  ST_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, ValueError,
           name << ": rank " << rank << " of " << ranks << " (expected 0 ≤ rank < ranks)");
}
}  // namespace

int64_t context_chunk_len(int64_t seq_len, int64_t ranks) {
  ST_CHECK(ranks >= 1 && seq_len > 0 && seq_len % (2 * ranks) == 0, ValueError,
           "context_chunk_len: a sequence of "
               << seq_len << " tokens over " << ranks
               << " context ranks (expected a positive multiple of 2·ranks = " << 2 * ranks << ")");
  return seq_len / (2 * ranks);
}

std::vector<int64_t> context_chunks(int64_t ranks, int64_t rank, ContextSplit split) {
  check_rank("context_chunks", ranks, rank);
  if (split == ContextSplit::load_balanced) return {rank, 2 * ranks - 1 - rank};
  return {2 * rank, 2 * rank + 1};
}

int64_t ring_source(int64_t ranks, int64_t rank, int64_t step) {
  check_rank("ring_source", ranks, rank);
  ST_CHECK(step >= 0 && step < ranks, ValueError,
           "ring_source: step " << step << " of a ring of " << ranks << " (expected 0 ≤ step < ranks)");
  return ((rank - step) % ranks + ranks) % ranks;
}

std::vector<RingBlock> ring_step_blocks(int64_t ranks, int64_t rank, int64_t step, ContextSplit split) {
  const std::vector<int64_t> qc = context_chunks(ranks, rank, split);
  const std::vector<int64_t> kc = context_chunks(ranks, ring_source(ranks, rank, step), split);
  std::vector<RingBlock> blocks;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const RingPair kind = kc[j] == qc[i] ? RingPair::causal : kc[j] < qc[i] ? RingPair::full : RingPair::skipped;
      blocks.push_back({i, j, qc[i], kc[j], kind});
    }
  return blocks;
}

BlockMask ring_block_mask(RingPair kind) {
  ST_CHECK(kind != RingPair::skipped, ValueError, "ring_block_mask: a skipped pair runs no block");
  return kind == RingPair::causal ? BlockMask::causal : BlockMask::full;
}

int64_t ring_step_scores(int64_t ranks, int64_t rank, int64_t step, int64_t chunk_len, ContextSplit split) {
  ST_CHECK(chunk_len > 0, ValueError, "ring_step_scores: chunk length " << chunk_len << " (expected > 0)");
  int64_t n = 0;
  for (const RingBlock& b : ring_step_blocks(ranks, rank, step, split))
    n += b.kind == RingPair::causal ? chunk_len * (chunk_len + 1) / 2
         : b.kind == RingPair::full ? chunk_len * chunk_len
                                    : 0;
  return n;
}

}  // namespace st::ops
