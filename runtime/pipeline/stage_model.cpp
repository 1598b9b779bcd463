#include "runtime/pipeline/stage_model.h"

#include <map>
#include <set>

namespace st::runtime {

StageModel::StageModel(std::shared_ptr<LanguageModel> full, std::vector<LayerRange> chunks)
    : full_(std::move(full)), chunks_(std::move(chunks)) {
  const int n = static_cast<int>(full_->layers().size());
  ST_CHECK(!chunks_.empty(), ValueError, "StageModel: no layers");
  int prev_end = 0;
  for (const LayerRange& r : chunks_) {
    ST_CHECK(prev_end <= r.begin && r.begin < r.end && r.end <= n, ValueError,
             "StageModel: chunk of layers [" << r.begin << ", " << r.end << ") of a " << n
                                             << "-layer model (chunks must be non-empty, disjoint, in order)");
    prev_end = r.end;
    local_begin_.push_back(layers().size());
    for (int i = r.begin; i < r.end; ++i) {
      auto& l = full_->layers()[i];
      add_layer(l->scope(), l);
      global_.push_back(i);
    }
  }
  set_generator(full_->generator());
  train(full_->is_training());
}

Tensor StageModel::forward_chunk(const Tensor& x, int c) {
  const size_t b = local_begin_.at(static_cast<size_t>(c));
  return forward_layers(x, b, b + static_cast<size_t>(chunk(c).end - chunk(c).begin));
}

void StageModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  // the whole model takes what it holds (a tp shard), then nothing outside this stage is kept
  (void)strict;
  full_->load_full_state_dict(full, /*strict=*/false);
}

std::vector<LayerRange> stage_chunks(const Partition& pieces, int stage, int stages) {
  const int n = static_cast<int>(pieces.first.size());
  ST_CHECK(stages >= 1 && stage >= 0 && stage < stages && n % stages == 0, ValueError,
           "stage_chunks: stage " << stage << " of " << stages << " over " << n << " pieces");
  std::vector<LayerRange> out;
  for (int q = stage; q < n; q += stages) out.push_back({pieces.begin(q), pieces.end(q)});
  return out;
}

std::vector<TiedWeight> tied_across_stages(const LanguageModel& full, const Partition& pieces, int stages) {
  std::map<std::string, std::set<int>> stages_of;
  for (int q = 0; q < static_cast<int>(pieces.first.size()); ++q)
    for (int l = pieces.begin(q); l < pieces.end(q); ++l)
      for (auto& [name, p] : full.layers()[l]->full_named_parameters()) stages_of[name].insert(q % stages);
  std::vector<TiedWeight> out;
  for (auto& [name, s] : stages_of)
    if (s.size() > 1) out.push_back({name, {s.begin(), s.end()}});
  return out;
}

Partition choose_partition(PartitionKind kind, const LanguageModel& full, int pieces, int64_t seq_len,
                           const std::vector<double>& profiled_costs) {
  const int L = static_cast<int>(full.layers().size());
  if (kind == PartitionKind::uniform) return partition_uniform(L, pieces);
  std::vector<double> costs;
  if (kind == PartitionKind::params) {
    for (auto& l : full.layers()) costs.push_back(l->cost(seq_len).param_bytes + 1.0);
  } else {  // profile
    ST_CHECK(static_cast<int>(profiled_costs.size()) == L, ValueError,
             "partition profile: " << profiled_costs.size() << " measured costs for " << L << " layers");
    costs = profiled_costs;
  }
  return partition_balanced(costs, pieces);
}

}  // namespace st::runtime
