#include "runtime/pipeline/stage_model.h"

#include <map>
#include <set>

namespace st::runtime {

StageModel::StageModel(std::shared_ptr<LanguageModel> part) : part_(std::move(part)) {
  ST_CHECK(part_ != nullptr && !part_->layers().empty(), ValueError, "StageModel: no layers");
  set_layer_range({part_->first_layer(), part_->first_layer() + static_cast<int>(part_->layers().size())},
                  part_->total_layers());
  for (auto& l : part_->layers()) add_layer(l->scope(), l);
  set_generator(part_->generator());
  train(part_->is_training());
}

void StageModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  // the stage's part takes what it holds (its layers, its tp shards) of the full tensors
  (void)strict;
  part_->load_full_state_dict(full, /*strict=*/false);
}

std::vector<std::string> tied_across_stages(const ModelDescription& model, const Partition& partition) {
  std::map<std::string, std::set<int>> stages_of;
  for (int s = 0; s < static_cast<int>(partition.first.size()); ++s)
    for (int l = partition.begin(s); l < partition.end(s); ++l)
      for (auto& [name, shape] : model.layers[static_cast<size_t>(l)].params) stages_of[name].insert(s);
  std::vector<std::string> out;
  for (auto& [name, stages] : stages_of)
    if (stages.size() > 1) out.push_back(name);
  return out;
}

std::vector<double> partition_costs(PartitionKind kind, const ModelDescription& model,
                                    const std::vector<double>& profiled) {
  const size_t L = model.layers.size();
  if (kind == PartitionKind::uniform) return {};
  if (kind == PartitionKind::profile) {
    ST_CHECK(profiled.size() == L, ValueError,
             "partition profile: " << profiled.size() << " measured costs for " << L << " layers");
    return profiled;
  }
  std::vector<double> costs;
  for (auto& l : model.layers) costs.push_back(l.param_bytes() + 1.0);
  return costs;
}

Partition choose_partition(PartitionKind kind, const ModelDescription& model, int stages,
                           const std::vector<double>& profiled) {
  const int L = static_cast<int>(model.layers.size());
  if (kind == PartitionKind::uniform) return partition_uniform(L, stages);
  return partition_balanced(partition_costs(kind, model, profiled), stages);
}

}  // namespace st::runtime
