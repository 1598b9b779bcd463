// SnapshotPlans: what an asynchronous save (--async-checkpoint 1, runtime/train/async_checkpoint.h)
// keeps from one save to the next so that a later save's step boundary does only the copies.
//
// A snapshot of one part (model, optimizer) is runtime/parallel/state_sharding.h's snapshot_parts:
// a plan (which keys this rank writes, their specs, their offsets in the host block, every rank's
// file name — one all-gather), the host block sized, then the copies. For a given set of tensors
// (names, shapes, dtypes, devices) under the run's rule, `elsewhere` and sharding, everything but
// the copies is the same at every save. So the first save builds each part's plan through
// snapshot_parts and keeps it with the key (name, shape, dtype, device) of every entry it was
// given and the entry each written tensor came from; a later save compares the entries it is given
// with the kept keys (no name built, nothing hashed: string and shape comparisons, ~450 for
// GPT-2 124M), and when they are equal copies each written tensor to its kept offset, and the
// kept PartSnapshot (specs, offsets, file names) goes to the writer as it is. Any difference
// (another name, shape, dtype or device, another count) rebuilds both plans.
//
// Every rank takes the same path: a rebuild is collective (the file names' all-gather), so with
// several ranks a later save first agrees on it — one all-reduce (max) of "my entries changed"
// over the world — and rebuilds everywhere when any rank's changed. One process: no collective.
//
// Kept only where the snapshot makes no collective of its own: the tp group has one rank (under
// tp > 1 split tensors are assembled over the group at every save, collectively, so every save
// rebuilds, as before). ZeRO-3's gathered tensors are fresh at each save but keyed alike, so their
// plans are kept too (the gather itself is the caller's, runtime/parallel/parameter_sharding.h).
// The rule, `elsewhere` and the sharding are the run's: a caller that changes them makes another
// SnapshotPlans.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/parallel/state_sharding.h"

namespace st::runtime {

class SnapshotPlans {
 public:
  SnapshotPlans();
  // Both parts' device blocks go (the writers have finished; runtime/parallel/state_sharding.h's
  // HostStaging::release). The host memory stays for the next save.
  void release();
  // CUDA tensors inside `block` are downloaded from there, not packed (HostStaging::download_directly)
  void download_directly(const Tensor& block);

  // This save's two parts. `model_metadata`: the model file's header metadata ({"format": "pt"}).
  // Collective over sharding.world when plans are built (snapshot_parts's calls) or, with several
  // ranks, when kept ones are checked (one all-reduce); `reused` says which path was taken.
  struct Parts {
    std::shared_ptr<const PartSnapshot> model, optimizer;
    bool reused = false;  // the kept plans served (no plan built, no file-name all-gather)
  };
  Parts snapshot(const NamedTensors& weights, const NamedTensors& optimizer_state, const ShardRule& rule,
                 const WrittenElsewhere& weights_elsewhere, const WrittenElsewhere& optimizer_elsewhere,
                 const StateSharding& sharding, const std::map<std::string, std::string>& model_metadata);

  int64_t builds() const { return builds_; }  // how many times the plans were built (tests)

 private:
  // One part's kept plan.
  struct Key {
    std::string name;
    Shape shape;
    DType dtype;
    Device device;
  };
  struct Kept {
    std::vector<Key> keys;               // every entry given at the build, in order
    std::vector<size_t> source;          // source[k]: the entry spec k of the snapshot copies
    std::shared_ptr<const PartSnapshot> snap;
  };
  static bool same(const Kept& kept, const NamedTensors& entries);
  static Kept keep(const NamedTensors& entries, PartSnapshot snap);
  static void copy(const Kept& kept, const NamedTensors& entries, HostStaging& host);

  std::shared_ptr<HostStaging> model_host_, optimizer_host_;  // kept from one save to the next
  bool kept_ = false;
  Kept model_, optimizer_;
  int64_t builds_ = 0;
};

}  // namespace st::runtime
