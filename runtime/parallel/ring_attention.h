// Context-parallel ring attention (issue 34) over a real communicator, as one autograd op: the
// cp group's N ranks each hold two chunks of one sequence (ops/ring_schedule.h: load-balanced,
// rank r holds chunks r and 2N − 1 − r, in that local order), and causal attention over the
// WHOLE sequence is computed by passing the key/value chunks around the ring.
//
//   q (B, H, Tl, D), k, v (B, Hkv, Tl, D), Hkv dividing H (grouped-query: query head h reads
//   key/value head h / (H / Hkv)); Tl = 2C, the rank's two chunks concatenated in local order
//   (runtime/parallel/context_shard.h makes them) → out (B, H, Tl, D) in q's dtype, row t of
//   out being the causal attention of the token at the GLOBAL position of local row t.
//
// Forward, N steps: at step s the rank holds the keys/values of rank (r − s) mod N in one packed
// buffer kv (2 [k | v], 2 [chunk slot], B, Hkv, C, D) in the input dtype; it posts ONE batch_p2p
// that sends that buffer to rank r + 1 and receives the next one from rank r − 1 (no transfer at
// the last step), runs the step's non-skipped (query chunk, key chunk) blocks
// (ops::block_attention_fwd: the diagonal causal, the past full) while the transfer is in flight,
// merges each into its query chunk's f32 accumulator (ops::merge_attention), and waits.
// Backward, the standard ring backward: Δ = rowsum(dO ∘ O) once per query chunk from the output
// (as the whole attention's backward uses its output), then the keys/values travel the ring
// again and with them an f32 accumulator dkv (2, 2, B, Hkv, C, D) of their gradients: at step s
// one batch_p2p sends the held kv onward (s < N − 1) and the dkv accumulator of the block held
// at step s − 1 (s ≥ 1) to rank r + 1, receiving both from r − 1; meanwhile the rank runs the
// step's block backwards (ops::block_attention_bwd with the global lse and Δ: dq added into the
// rank's f32 accumulator, the block's dk, dv into a local f32 partial); after the wait the
// partial is added to the received accumulator. After step N − 1 one more batch_p2p carries the
// accumulators their last hop: every block's dk, dv arrive at its owner after N hops, summed
// over every rank that attended to it. The forward issues N − 1 batches, the backward N + 1, in
// the same order with the same tags on every rank, each send's receive in the same batch of its
// peer (correct under rendezvous: NCCL, SHARDTRAIN_P2P=strict). Bytes a rank sends: forward
// (N − 1)·|kv|, backward (N − 1)·|kv| + N·|kv in f32|.
//
// Every rank of the group calls the op with the same shapes, and runs its backward, in the same
// order (as a collective): a rank that skips either leaves its neighbours waiting until the
// communicator's deadline.
// A null group or a group of size 1: one causal block over the local sequence (Tl need not be
// even) — the forward is ops::causal_attention's bit for bit (tests/ops/test_ring_attention.cpp).
// Inputs are not modified; q, k, v must share dtype and device; gradients come out in the
// inputs' dtype (=). CPU: any float dtype; CUDA: what ops/block_attention.h's kernels take.
// docs/design.md "Context parallelism: the block ops" has the whole picture.
#pragma once
#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "ops/ring_schedule.h"
#include "tensor/tensor.h"

namespace st::runtime {

using CpGroup = std::shared_ptr<comm::Communicator>;

// What this rank's ring computed, counted from the blocks it ran (the load-balance measurement):
// visible (query, key) scores summed over batch and query heads — B·H·C(C + 1)/2 per causal block,
// B·H·C² per full one (the masked half of a causal block is not counted: a flash kernel skips it,
// to O(C)) — the blocks run, and the payload bytes it sent.
struct RingWork {
  int64_t forward_scores = 0, backward_scores = 0;
  int64_t forward_blocks = 0, backward_blocks = 0;
  int64_t sent_bytes = 0;
};

// Tags of the ring's transfers (a caller's other point-to-point on the same group must not reuse
// them in the same order).
inline constexpr int kRingKvTag = 340, kRingDkvTag = 341;

// The ring attention of this rank's two chunks (see above). `work`, when given, is added to by
// the forward and by the backward (it must live until the backward ran: a shared pointer).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const CpGroup& cp,
                      ops::ContextSplit split = ops::ContextSplit::load_balanced,
                      std::shared_ptr<RingWork> work = nullptr);

}  // namespace st::runtime
