// LanguageModel: a Module that is an ordered list of Layers — the first maps token ids
// (B, T) i64 to hidden (B, T, C), the last maps hidden to logits (B, T, V). The loss is not part
// of forward: the gradient sources (runtime/train/) call loss() on the last layer's output, so a
// pipeline stage runs any contiguous slice of layers and only the last stage needs the targets.
//
// Parameter names are the layers' full names (each layer is registered under its scope, e.g.
// "transformer.h.3"), whatever the split. A parameter held by two layers (the GPT's tied wte, in
// the first and the last layer) is one tensor in one process; with pp > 1 the stage holding the
// last layer holds a copy whose gradient must be summed with the first stage's before the step
// (both copies have the same full name, which is how the pipeline finds them: tied_names()).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/nn/module.h"
#include "comm/communicator.h"
#include "runtime/common/shard_spec.h"
#include "tensor/rng.h"

namespace st::runtime {

class LanguageModel : public Module {
 public:
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  // tokens (B, T) i64 → logits (B, T, V): every layer in order.
  Tensor forward(const Tensor& tokens);
  // Layers [begin, end) on x; with recompute on, each recomputable layer keeps only its input
  // and runs again in backward (runtime/nn/recompute.h): same numbers, less memory.
  Tensor forward_layers(const Tensor& x, size_t begin, size_t end);
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }
  // Layer i is recomputed (when recompute is on): every layer but the model's first and last,
  // which hold the tied embedding (its gradient hook must fire once).
  virtual bool recomputable(size_t i) const { return i != 0 && i + 1 != layers_.size(); }

  virtual std::string family() const = 0;    // "gpt" | "simple-transformer" | "mlp"
  virtual int64_t vocab_size() const = 0;
  virtual int64_t context_length() const = 0;  // longest sequence the model accepts
  // What rebuilds the model: for the GPT the Hugging Face config.json, else our own fields.
  virtual nlohmann::json config_json() const = 0;
  // Full names of parameters held by more than one layer.
  std::vector<std::string> tied_names() const;
  // Forward FLOPs per token of the whole model at sequence length T (sum of the layers' costs).
  double flops_per_token(int64_t seq_len) const;
  // The generator the model's dropouts draw from (shared by all layers; null when the model has
  // no randomness). The trainer checkpoints its (seed, offset).
  const std::shared_ptr<Generator>& generator() const { return gen_; }

  // Mean cross-entropy of this model's logits against targets (B, T) → () f32. A tensor-parallel
  // model's logits are a vocabulary shard and its loss is collective over the tp group.
  virtual Tensor loss(const Tensor& logits, const Tensor& targets) const;
  // Loads full tensors by name (a checkpoint's model.safetensors); a tensor-parallel model keeps
  // its shards. Default: load_state_dict.
  virtual void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict = true);
  // How each parameter splits over a tp group (null: every parameter whole on every rank).
  virtual ShardRule shard_rule() const { return nullptr; }
  // The tp group the model is split over (null: none).
  virtual std::shared_ptr<comm::Communicator> tensor_parallel_group() const { return nullptr; }

 protected:
  // Appends `layer` as the next layer, registered (and scoped) under `scope`.
  void add_layer(const std::string& scope, std::shared_ptr<Layer> layer);
  void set_generator(std::shared_ptr<Generator> g) { gen_ = std::move(g); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
  std::shared_ptr<Generator> gen_;
  bool recompute_ = false;
};

}  // namespace st::runtime
