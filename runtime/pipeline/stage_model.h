// StageModel: the layers one pipeline stage runs, itself a LanguageModel (so the trainer, the
// optimizer and checkpoints treat it like a whole model). A stage holds one contiguous range of
// the model's layers (GPipe, 1F1B) or v ranges, its chunks (interleaved 1F1B: the model cut into
// p·v chunks, stage s holding chunks s, s + p, …, s + (v−1)·p, Megatron's layout — stage_chunks).
// It wraps a model built with only those ranges (runtime/setup/model_registry.h): no stage holds
// another stage's layers.
//
// Parameters keep their full names. A parameter used by layers on two stages (the GPT's wte, in
// the embedding on stage 0 and in the head on stage p−1) appears on both under the same name, each
// stage holding its own copy, and the pipeline sums their gradients (tied_across_stages); used by
// two chunks of ONE stage it is one tensor there (the model built both layers), listed once, and
// autograd adds both uses into its gradient.
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
  // `part`: a model holding its stage's ranges of its full model (one per chunk, in order).
  explicit StageModel(std::shared_ptr<LanguageModel> part);
  std::string family() const override { return part_->family(); }
  int64_t vocab_size() const override { return part_->vocab_size(); }
  int64_t context_length() const override { return part_->context_length(); }
  int64_t depth() const override { return part_->depth(); }
  nlohmann::json config_json() const override { return part_->config_json(); }
  void init_weights(uint64_t seed) override { part_->init_weights(seed); }
  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override {
    part_->init_parameter(name, t, seed, first);
  }
  Tensor loss(const Tensor& logits, const Tensor& targets) const override { return part_->loss(logits, targets); }
  bool chunked_head() const override { return part_->chunked_head(); }
  std::vector<std::shared_ptr<ops::Fp8LinearState>> fp8_states() const override { return part_->fp8_states(); }
  NamedFp8States fp8_named_states() const override { return part_->fp8_named_states(); }
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) override;
  ShardRule shard_rule() const override { return part_->shard_rule(); }
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return part_->tensor_parallel_group(); }
  bool recomputable(size_t i) const override { return part_->recomputable(i); }

  int chunks() const { return static_cast<int>(ranges().size()); }
  const LayerRange& chunk(int c) const { return ranges().at(static_cast<size_t>(c)); }
  // Chunk c's layers on x: the model's first layer takes token ids (B, T) i64, the others hidden
  // (B, T, C); the model's last layer returns logits (B, T, V) (chunked head: (B, T, C), for loss()).
  Tensor forward_chunk(const Tensor& x, int c);
  bool is_first() const { return holds_first(); }  // holds the model's first layer
  bool is_last() const { return holds_last(); }    // holds the model's last layer

 private:
  std::shared_ptr<LanguageModel> part_;
  std::vector<size_t> local_begin_;  // chunk c's first layer in layers()
};

// The chunks stage `stage` of `stages` holds when `pieces` cuts the model into stages·v pieces:
// pieces stage, stage + stages, … (v = 1: the stage's one piece).
std::vector<LayerRange> stage_chunks(const Partition& pieces, int stage, int stages);

// A parameter used by layers on more than one stage, and those stages (ascending): the lowest
// counts it in the gradient norm and writes it to checkpoints, all of them sum its gradient.
struct TiedWeight {
  std::string name;
  std::vector<int> stages;
};
// Over `pieces` of the model described by `model`, assigned to `stages` stages as stage_chunks does.
std::vector<TiedWeight> tied_across_stages(const ModelDescription& model, const Partition& pieces, int stages);

// The per-layer costs a partition balances: for params the layers' parameter bytes; for profile
// the measured times (`profiled`, one per layer); none for uniform.
std::vector<double> partition_costs(PartitionKind kind, const ModelDescription& model,
                                    const std::vector<double>& profiled = {});
// The split of the model's layers into `pieces` (stages · virtual stages; costs from
// partition_costs).
Partition choose_partition(PartitionKind kind, const ModelDescription& model, int pieces,
                           const std::vector<double>& profiled = {});

}  // namespace st::runtime
