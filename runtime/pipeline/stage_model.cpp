#include "runtime/pipeline/stage_model.h"

#include <map>
#include <set>

namespace st::runtime {

StageModel::StageModel(std::shared_ptr<LanguageModel> full, int begin, int end)
    : full_(std::move(full)), begin_(begin), end_(end) {
  const int n = static_cast<int>(full_->layers().size());
  ST_CHECK(0 <= begin && begin < end && end <= n, ValueError,
           "StageModel: layers [" << begin << ", " << end << ") of a " << n << "-layer model");
  for (int i = begin; i < end; ++i) {
    auto& l = full_->layers()[i];
    add_layer(l->scope(), l);
  }
  set_generator(full_->generator());
  train(full_->is_training());
}

void StageModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  // the whole model takes what it holds (a tp shard), then nothing outside this stage is kept
  (void)strict;
  full_->load_full_state_dict(full, /*strict=*/false);
}

std::vector<std::string> tied_across_stages(const LanguageModel& full, const Partition& partition) {
  std::map<std::string, std::set<int>> stages_of;
  for (int s = 0; s < static_cast<int>(partition.first.size()); ++s)
    for (int l = partition.begin(s); l < partition.end(s); ++l)
      for (auto& [name, p] : full.layers()[l]->full_named_parameters()) stages_of[name].insert(s);
  std::vector<std::string> out;
  for (auto& [name, stages] : stages_of)
    if (stages.size() > 1) out.push_back(name);
  return out;
}

Partition choose_partition(PartitionKind kind, const LanguageModel& full, int stages, int64_t seq_len,
                           const std::vector<double>& profiled_costs) {
  const int L = static_cast<int>(full.layers().size());
  if (kind == PartitionKind::uniform) return partition_uniform(L, stages);
  std::vector<double> costs;
  if (kind == PartitionKind::params) {
    for (auto& l : full.layers()) costs.push_back(l->cost(seq_len).param_bytes + 1.0);
  } else {  // profile
    ST_CHECK(static_cast<int>(profiled_costs.size()) == L, ValueError,
             "partition profile: " << profiled_costs.size() << " measured costs for " << L << " layers");
    costs = profiled_costs;
  }
  return partition_balanced(costs, stages);
}

}  // namespace st::runtime
