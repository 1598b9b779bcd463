// Gathering named tensors from every rank onto rank 0, for checkpoints of sharded layouts
// (pipeline stages hold different layers; ZeRO ranks hold different optimizer shards).
//
// Through files, like the trace: each contributing rank writes DIR/.gather-<what>/rank<R>.safetensors,
// a barrier, then rank 0 reads the parts in rank order and keeps the first tensor of each name
// (copies held by several ranks — tied weights, DP replicas — are equal by construction), a
// second barrier, and rank 0 removes the parts. DIR must be visible to every rank (the
// checkpoint directory already has to be, on a shared file system across nodes).
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "runtime/io/safetensors.h"

namespace st::runtime {

// Collective over `world`. `contribute`: whether this rank's tensors are needed (ranks holding
// only duplicates may skip writing). Returns the union on rank 0, an empty list elsewhere.
NamedTensors gather_named_tensors(const NamedTensors& local, bool contribute, comm::Communicator& world,
                                  const std::string& dir, const std::string& what);

}  // namespace st::runtime
