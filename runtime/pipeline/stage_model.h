// StageModel: the layers one pipeline stage runs, itself a LanguageModel (so the trainer, the
// optimizer and checkpoints treat it like a whole model). A stage holds one contiguous range of
// the model's layers (GPipe, 1F1B) or v ranges, its chunks (interleaved 1F1B: the model cut into
// p·v chunks, stage s holding chunks s, s + p, …, s + (v−1)·p, Megatron's layout — stage_chunks).
// Parameters keep their full names. A parameter used by layers on two stages (the GPT's wte, in
// the embedding on stage 0 and in the head on stage p−1) appears on both under the same name and
// the pipeline sums its gradients (tied_across_stages); used by two chunks of ONE stage it is one
// tensor there, listed once, and autograd adds both uses into its gradient.
#pragma once
#include <memory>

#include "runtime/common/partition.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

// Layers [begin, end) of the full model.
struct LayerRange {
  int begin = 0, end = 0;
  bool operator==(const LayerRange&) const = default;
};

class StageModel : public LanguageModel {
 public:
  // chunks: non-empty, disjoint, in model order.
  StageModel(std::shared_ptr<LanguageModel> full, std::vector<LayerRange> chunks);
  StageModel(std::shared_ptr<LanguageModel> full, int begin, int end)
      : StageModel(std::move(full), std::vector<LayerRange>{{begin, end}}) {}
  std::string family() const override { return full_->family(); }
  int64_t vocab_size() const override { return full_->vocab_size(); }
  int64_t context_length() const override { return full_->context_length(); }
  nlohmann::json config_json() const override { return full_->config_json(); }
  Tensor loss(const Tensor& logits, const Tensor& targets) const override { return full_->loss(logits, targets); }
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) override;
  ShardRule shard_rule() const override { return full_->shard_rule(); }
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return full_->tensor_parallel_group(); }
  bool recomputable(size_t i) const override { return full_->recomputable(static_cast<size_t>(global_[i])); }

  int chunks() const { return static_cast<int>(chunks_.size()); }
  const LayerRange& chunk(int c) const { return chunks_.at(static_cast<size_t>(c)); }
  // Chunk c's layers on x: the model's first layer takes token ids (B, T) i64, the others hidden
  // (B, T, C); the model's last layer returns logits (B, T, V).
  Tensor forward_chunk(const Tensor& x, int c);
  bool is_first() const { return chunks_.front().begin == 0; }  // holds the model's first layer
  bool is_last() const { return chunks_.back().end == static_cast<int>(full_->layers().size()); }
  const LanguageModel& full() const { return *full_; }

 private:
  std::shared_ptr<LanguageModel> full_;
  std::vector<LayerRange> chunks_;
  std::vector<size_t> local_begin_;  // chunk c's first layer in layers()
  std::vector<int> global_;          // layers()[i] is the full model's layer global_[i]
};

// The chunks stage `stage` of `stages` holds when `pieces` cuts the model into stages·v pieces:
// pieces stage, stage + stages, … (v = 1: the stage's one piece).
std::vector<LayerRange> stage_chunks(const Partition& pieces, int stage, int stages);

// A parameter used by layers on more than one stage, and those stages (ascending): the lowest
// counts it in the gradient norm, all of them sum its gradient.
struct TiedWeight {
  std::string name;
  std::vector<int> stages;
};
// Over `pieces` assigned to `stages` stages as stage_chunks does.
std::vector<TiedWeight> tied_across_stages(const LanguageModel& full, const Partition& pieces, int stages);

// Per-layer costs for --partition params (parameter bytes) and the chosen split into `pieces`
// (stages · virtual stages); "profile" is measured by the caller and passed as costs.
Partition choose_partition(PartitionKind kind, const LanguageModel& full, int pieces, int64_t seq_len,
                           const std::vector<double>& profiled_costs = {});

}  // namespace st::runtime
