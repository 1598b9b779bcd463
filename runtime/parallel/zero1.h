// ZeRO-1: each DP rank owns a contiguous run of the parameters and keeps the optimizer state
// (and, in fp16/bf16, the f32 master weights) of that run only; the gradients go to the owners
// per bucket during backward, and the owners' updated values come back per bucket after the step.
// ZeRO-2 (--zero 2) is the same with ReducerOptions::shard_gradients: a rank keeps the gradient
// buckets of its own run only; another owner's bucket is allocated when it is final, the
// gradients backward made for it copied in and freed, and freed itself once reduced to its owner
// (grad_reducer.h), and its updated values arrive in a buffer of their own (at most kShardWindow
// at once). With gradient accumulation the full gradients are kept until the last micro-batch,
// whose backward communicates (one reduce per bucket per step, as ZeRO-1).
//
// Ownership. Parameters (an identical list on every rank of `dp`) are cut into dp contiguous runs
// in registration order, balanced by bytes: the cut that minimises the largest run
// (partition_balanced, exact). The granularity is the parameter, so the rounding is this: every
// rank's share of the parameter elements — and so of the AdamW state (2 f32 per element) and of
// the f32 masters — is below total/dp + the largest parameter (a greedy cut closing each run
// once it reaches total/dp achieves that bound, the optimum is no worse), and the shares add up
// to the total. With fewer parameters than ranks, rank i < n owns parameter i and the rest none.
// Ownership is fixed at construction (by bytes, so the same before and after the trainer casts
// every parameter to the compute dtype).
//
// Gradients. A GradReducer (runtime/parallel/grad_reducer.h) whose buckets never hold two
// owners' parameters: .grad() is a view of its bucket, buckets launch in ready order from the
// grad-ready hooks of the step's last backward, overlapped with it, in --grad-comm-dtype, cut by
// --bucket-mb, and each is reduced to its owner (comm's reduce). The memory beside the
// parameters is the gradients themselves (P, unpadded) plus at most
// ReducerOptions::comm_buffers bucket-sized buffers when the comm dtype differs — no buffer of
// every gradient or value besides.
//
// Which collective reduces a bucket to its one owner (ZeRO-2's "reduce-scatter" is this too: over
// a step, each rank receives the sums of its own buckets only) (ring / pipelined algorithms; n bytes of one
// bucket, P bytes of all gradients per step in the comm dtype; bytes each rank sends):
//   all_reduce, non-owners unused       2(dp−1)/dp · n     per step 2(dp−1)/dp · P
//   reduce to the owner                 ≤ n                per step ≤ P; (dp−1)·P over all ranks  ← this one
//   reduce_scatter of dp owners' chunks (dp−1) · m         per step (dp−1)/dp · P'
// The all-reduce moves what plain DP moves, twice a reduce's total over the ranks. A
// reduce_scatter delivers one chunk to each rank, so it needs dp equal chunks, one per owner, per
// call: with contiguous ownership those chunks come from every part of the model and are final
// only when backward ends (no overlap); with ownership interleaved per bucket it overlaps, but
// every chunk is padded to the largest of its dp buckets at parameter granularity (m ≥ n, P' ≥ P:
// a GPT's wte bucket pads dp−1 others to its size), and the gradients, views of that layout,
// carry the padding. So: a reduce per bucket. After reduce_gradients() only the owner holds a
// bucket's group sum; the other ranks keep their local gradient there (no optimizer reads it).
// Hence weights tied across pipeline stages (TiedGradSync) are summed over their stages BEFORE
// their buckets are reduced: the wiring names them in ReducerOptions::launch_in_finalize (their
// buckets wait for finalize()) and runs the tied sum's finish() before this one's
// (runtime/train/parallel_training.cpp); the sum of the stage sums is the same either way.
//
// Values. After a step the owner of each bucket copies its updated parameters into that bucket's
// gradient buffer (no longer needed: the next step zeroes it) and broadcasts it from there; the
// others copy the values out. All buckets' broadcasts are in flight at once, each in its own
// buffer, so no staging buffer is added. Per step: V bytes of values (the parameters' dtype);
// a pipelined broadcast sends ≤ n per rank and bucket (≤ V per step), an all_gather of dp
// owners' chunks (dp−1)/dp · V' with the padding above. A skipped step (fp16 overflow)
// broadcasts nothing: no parameter changed. The copies out wait for each broadcast with
// Work::wait_on_stream() (on NCCL the stream waits, not the host); the host sees them complete at
// the next zero_grad().
//
// SHARDTRAIN_TEST_SKIP_GRAD_COMM=1 (docs/testing.md) skips the broadcasts as well as the
// gradient collectives. Every rank of `dp` calls zero_grad / reduce_gradients /
// broadcast_updates in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/parallel/grad_reducer.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct Zero1Stats {
  int64_t broadcasts = 0;
  int64_t bytes_broadcast = 0;  // bucket bytes broadcast (parameters' dtype), summed over calls
  double broadcast_ms = 0;      // broadcast_updates(): packing, the broadcasts, unpacking
};

class Zero1 {
 public:
  // params: this rank's (full name, parameter) list in registration order, identical on every
  // rank of `dp` (same names, shapes, dtype, device). options: the buckets (segment and
  // reduce_to_segment are set here; launch_in_finalize is the caller's).
  Zero1(NamedTensors params, std::shared_ptr<comm::Communicator> dp, ReducerOptions options = {});
  Zero1(const Zero1&) = delete;
  Zero1& operator=(const Zero1&) = delete;

  const NamedTensors& owned() const { return owned_; }  // this rank's parameters (the optimizer covers these)
  bool owns(const std::string& name) const;
  int owner(const std::string& name) const;  // throws ValueError for an unknown name
  // First and one-past-last parameter index owned by `rank` (registration order).
  int begin(int rank) const { return first_[static_cast<size_t>(rank)]; }
  int end(int rank) const { return first_[static_cast<size_t>(rank) + 1]; }
  int64_t owned_numel(int rank) const;  // elements of `rank`'s run

  // Zeroes the gradients (allocating the buckets first) and turns communication off: earlier
  // micro-batches accumulate locally.
  void zero_grad();
  // Just before the step's last backward: its grad-ready hooks reduce each bucket when final.
  void set_sync(bool on) { reducer_.set_sync(on); }
  // After the last backward: launches what is left and waits. Afterwards every OWNED parameter's
  // .grad() holds the sum over the DP group; the others hold this rank's own gradient.
  void reduce_gradients() { reducer_.finalize(); }
  // After the optimizer updated the owned parameters in place: every rank receives every
  // parameter's new value (in the parameters' dtype), bucket by bucket.
  void broadcast_updates();

  const GradReducer& reducer() const { return reducer_; }
  GradReducer& reducer() { return reducer_; }
  const Zero1Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  NamedTensors params_;
  NamedTensors owned_;
  std::shared_ptr<comm::Communicator> dp_;
  std::vector<int> first_;        // (dp + 1): rank r owns params [first_[r], first_[r+1])
  std::vector<int> owner_of_;     // param index → rank
  std::unordered_map<std::string, size_t> index_;
  GradReducer reducer_;           // buckets never straddle two owners, each reduced to its owner
  std::vector<comm::WorkPtr> broadcasts_;  // the last broadcast_updates(), until the next zero_grad()
  Zero1Stats stats_;
};

}  // namespace st::runtime
