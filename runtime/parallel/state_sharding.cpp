#include "runtime/parallel/state_sharding.h"

#include "runtime/parallel/state_gather.h"
#include "runtime/parallel/tp_shard.h"

namespace st::runtime {

NamedTensors ShardedState::gather(const NamedTensors& local, const std::string& what) {
  NamedTensors full = local;
  if (o_.tp_rule)  // tp shards → full tensors (collective over the tp group)
    full = gather_state_dict(local, what == "optimizer" ? optimizer_state_shard_rule(o_.tp_rule) : o_.tp_rule, *tp_);
  return gather_named_tensors(full, o_.contribute, *world_, o_.dir, what);
}

}  // namespace st::runtime
