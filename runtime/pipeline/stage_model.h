// StageModel: the contiguous slice of a model's layers that one pipeline stage runs, itself a
// LanguageModel (so the trainer, the optimizer and checkpoints treat it like a whole model). It
// wraps a model built with only that LayerRange (runtime/train/model_registry.h): no stage holds
// another stage's layers. Parameters keep their full names; a parameter tied across the slice
// boundary (the GPT's wte, held by the first and the last layer) appears in both the first and
// the last stage under the same name, each stage holding its own copy — the pipeline sums their
// two gradients (tied_across_stages).
//
// The partition is cut from the model's description (ModelDescription: names, full shapes and
// costs from the config), so choosing it builds nothing.
#pragma once
#include <memory>

#include "runtime/common/partition.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

class StageModel : public LanguageModel {
 public:
  // `part`: a model holding layers [begin, end) of its full model.
  explicit StageModel(std::shared_ptr<LanguageModel> part);
  std::string family() const override { return part_->family(); }
  int64_t vocab_size() const override { return part_->vocab_size(); }
  int64_t context_length() const override { return part_->context_length(); }
  nlohmann::json config_json() const override { return part_->config_json(); }
  void init_weights(uint64_t seed) override { part_->init_weights(seed); }
  Tensor loss(const Tensor& logits, const Tensor& targets) const override { return part_->loss(logits, targets); }
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) override;
  ShardRule shard_rule() const override { return part_->shard_rule(); }
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return part_->tensor_parallel_group(); }
  int begin() const { return first_layer(); }
  int end() const { return first_layer() + static_cast<int>(layers().size()); }
  bool recomputable(size_t i) const override { return part_->recomputable(i); }
  bool is_first() const { return holds_first(); }
  bool is_last() const { return holds_last(); }

 private:
  std::shared_ptr<LanguageModel> part_;
};

// Names of parameters that live in more than one stage of `partition` (weight tying across
// stages): they are held by the first and the last stage that use them.
std::vector<std::string> tied_across_stages(const ModelDescription& model, const Partition& partition);

// The per-layer costs a partition balances: for params the layers' parameter bytes; for profile
// the measured times (`profiled`, one per layer); none for uniform.
std::vector<double> partition_costs(PartitionKind kind, const ModelDescription& model,
                                    const std::vector<double>& profiled = {});
// The split of the model's layers into `stages` (costs from partition_costs).
Partition choose_partition(PartitionKind kind, const ModelDescription& model, int stages,
                           const std::vector<double>& profiled = {});

}  // namespace st::runtime
