#include "runtime/pipeline/stage_model.h"

#include <map>
#include <set>

namespace st::runtime {

StageModel::StageModel(std::shared_ptr<LanguageModel> part) : part_(std::move(part)) {
  ST_CHECK(part_ != nullptr && !part_->layers().empty(), ValueError, "StageModel: no layers");
  set_layer_ranges(part_->ranges(), part_->total_layers());
  for (const LayerRange& r : part_->ranges()) {
    local_begin_.push_back(layers().size());
    for (int i = r.begin; i < r.end; ++i) {
      auto& l = part_->layers()[layers().size()];
      add_layer(l->scope(), l);
    }
  }
  set_generator(part_->generator());
  train(part_->is_training());
}

Tensor StageModel::forward_chunk(const Tensor& x, int c) {
  const size_t b = local_begin_.at(static_cast<size_t>(c));
  return forward_layers(x, b, b + static_cast<size_t>(chunk(c).end - chunk(c).begin));
}

void StageModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  // the stage's part takes what it holds (its layers, its tp shards) of the full tensors
  (void)strict;
  part_->load_full_state_dict(full, /*strict=*/false);
}

std::vector<LayerRange> stage_chunks(const Partition& pieces, int stage, int stages) {
  const int n = static_cast<int>(pieces.first.size());
  ST_CHECK(stages >= 1 && stage >= 0 && stage < stages && n % stages == 0, ValueError,
           "stage_chunks: stage " << stage << " of " << stages << " over " << n << " pieces");
  std::vector<LayerRange> out;
  for (int q = stage; q < n; q += stages) out.push_back({pieces.begin(q), pieces.end(q)});
  return out;
}

std::vector<TiedWeight> tied_across_stages(const ModelDescription& model, const Partition& pieces, int stages) {
  std::map<std::string, std::set<int>> stages_of;
  for (int q = 0; q < static_cast<int>(pieces.first.size()); ++q)
    for (int l = pieces.begin(q); l < pieces.end(q); ++l)
      for (auto& [name, shape] : model.layers.at(static_cast<size_t>(l)).params) stages_of[name].insert(q % stages);
  std::vector<TiedWeight> out;
  for (auto& [name, s] : stages_of)
    if (s.size() > 1) out.push_back({name, {s.begin(), s.end()}});
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

Partition choose_partition(PartitionKind kind, const ModelDescription& model, int pieces,
                           const std::vector<double>& profiled) {
  const int L = static_cast<int>(model.layers.size());
  if (kind == PartitionKind::uniform) return partition_uniform(L, pieces);
  return partition_balanced(partition_costs(kind, model, profiled), pieces);
}

}  // namespace st::runtime
