// StageModel: the contiguous slice [begin, end) of a LanguageModel's layers that one pipeline
// stage runs, itself a LanguageModel (so the trainer, the optimizer and checkpoints treat it
// like a whole model). Parameters keep their full names; a parameter tied across the slice
// boundary (the GPT's wte, held by the first and the last layer) appears in both the first and
// the last stage under the same name — the pipeline sums its two gradients (tied_across_stages).
#pragma once
#include <memory>

#include "runtime/nn/language_model.h"
#include "runtime/common/partition.h"

namespace st::runtime {

class StageModel : public LanguageModel {
 public:
  StageModel(std::shared_ptr<LanguageModel> full, int begin, int end);
  std::string family() const override { return full_->family(); }
  int64_t vocab_size() const override { return full_->vocab_size(); }
  int64_t context_length() const override { return full_->context_length(); }
  nlohmann::json config_json() const override { return full_->config_json(); }
  Tensor loss(const Tensor& logits, const Tensor& targets) const override { return full_->loss(logits, targets); }
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) override;
  ShardRule shard_rule() const override { return full_->shard_rule(); }
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return full_->tensor_parallel_group(); }
  int begin() const { return begin_; }
  int end() const { return end_; }
  bool recomputable(size_t i) const override { return full_->recomputable(begin_ + i); }
  bool is_first() const { return begin_ == 0; }
  bool is_last() const { return end_ == static_cast<int>(full_->layers().size()); }
  const LanguageModel& full() const { return *full_; }

 private:
  std::shared_ptr<LanguageModel> full_;
  int begin_, end_;
};

// Names of parameters that live in more than one stage of `partition` (weight tying across
// stages): they are held by the first and the last stage that use them.
std::vector<std::string> tied_across_stages(const LanguageModel& full, const Partition& partition);

// Per-layer costs for --partition params (parameter bytes) and the chosen split; "profile" is
// measured by the caller and passed as costs.
Partition choose_partition(PartitionKind kind, const LanguageModel& full, int stages, int64_t seq_len,
                           const std::vector<double>& profiled_costs = {});

}  // namespace st::runtime
