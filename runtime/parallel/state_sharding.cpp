#include "runtime/parallel/state_sharding.h"

#include "runtime/optim/optimizer.h"
#include "runtime/parallel/state_gather.h"
#include "runtime/parallel/tp_shard.h"

namespace st::runtime {

NamedTensors ShardedState::gather(const NamedTensors& local, const std::string& what) {
  NamedTensors full = local;
  if (o_.tp_rule)  // tp shards → full tensors (collective over the tp group)
    full = gather_state_dict(local, what == "optimizer" ? optimizer_state_shard_rule(o_.tp_rule) : o_.tp_rule, *tp_);
  return gather_named_tensors(full, o_.contribute, *world_, o_.dir, what);
}

void ShardedState::load_model(LanguageModel& model, const std::map<std::string, Tensor>& full) {
  model.load_full_state_dict(full, /*strict=*/!o_.partial);
}

std::map<std::string, Tensor> ShardedState::optimizer_part(const std::map<std::string, Tensor>& full,
                                                           const NamedTensors& params) {
  std::map<std::string, Tensor> state = full;
  if (o_.tp_rule) {
    NamedTensors list(full.begin(), full.end());
    state.clear();
    for (auto& [n, t] : shard_state_dict(list, optimizer_state_shard_rule(o_.tp_rule), tp_->size(), tp_->rank()))
      state.emplace(n, t);
  }
  return o_.partial ? filter_optimizer_state(state, params) : state;
}

}  // namespace st::runtime
