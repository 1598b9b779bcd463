// StateSharding: how this rank's part of the training state relates to a checkpoint, which
// holds full tensors by name (so a run resumes under any layout).
//   gather(local, what)          collective: the full tensors ("model" weights or "optimizer"
//                                state) on rank 0, nothing elsewhere
// (Loading needs no layout: each rank reads its own part by name, runtime/parallel/state_io.h.)
// ReplicatedState: every rank that saves holds everything (one process; plain data parallel,
// where rank 0 writes alone). ShardedState: pipeline stages, tp shards and ZeRO shards,
// assembled over the tp group and then gathered onto rank 0 (runtime/parallel/state_gather.h).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/common/shard_spec.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

class StateSharding {
 public:
  virtual ~StateSharding() = default;
  virtual NamedTensors gather(const NamedTensors& local, const std::string& what) = 0;
};

class ReplicatedState : public StateSharding {
 public:
  explicit ReplicatedState(int rank = 0) : rank_(rank) {}
  NamedTensors gather(const NamedTensors& local, const std::string&) override {
    return rank_ == 0 ? local : NamedTensors{};
  }

 private:
  int rank_;
};

struct ShardedStateOptions {
  bool contribute = true;  // this rank's tensors are needed by rank 0 (not a duplicate)
  ShardRule tp_rule;       // null unless the model is split over a tp group of > 1 ranks
  std::string dir;         // the checkpoint directory, visible to every rank (the gather's files)
};

class ShardedState : public StateSharding {
 public:
  ShardedState(std::shared_ptr<comm::Communicator> world, std::shared_ptr<comm::Communicator> tp,
               ShardedStateOptions options)
      : world_(std::move(world)), tp_(std::move(tp)), o_(std::move(options)) {}
  NamedTensors gather(const NamedTensors& local, const std::string& what) override;

 private:
  std::shared_ptr<comm::Communicator> world_, tp_;
  ShardedStateOptions o_;
};

}  // namespace st::runtime
