// LanguageModel: a Module that is an ordered list of Layers — the first maps token ids
// (B, T) i64 to hidden (B, T, C), the last maps hidden to logits (B, T, V). The loss is not part
// of forward: the gradient sources (runtime/train/) call loss() on the last layer's output, so a
// pipeline stage runs any contiguous slice of layers and only the last stage needs the targets.
// With the chunked head on (ModelForm::chunked_head; the trainer's --chunked-head) the last
// layer returns its hidden state before the vocabulary projection instead, (B, T, C), and loss()
// runs the projection fused with the cross-entropy in row chunks (ops/lm_head_loss.h): training
// without the (B·T, V) logits. Generation and anything else that needs logits leave it off.
//
// Parameter names are the layers' full names (each layer is registered under its scope, e.g.
// "transformer.h.3"), whatever the split. A parameter held by two layers (the GPT's tied wte, in
// the first and the last layer) is one tensor in one process; with pp > 1 the stage holding the
// last layer holds a copy whose gradient must be summed with the first stage's before the step
// (both copies have the same full name, which is how the pipeline finds them: tied_names()).
//
// A model object may hold only some ranges of its layers (LayerRange, one or more, disjoint and
// in order): a pipeline stage builds just its own (one range, or one per chunk under the
// interleaved schedule), so no rank ever allocates the whole model. Layer indices below are the
// full model's (global_layer(i) of total_layers()). A weight used by two layers of ONE object
// (the GPT's wte with both the embedding and the head held) is one tensor there, as in the whole
// model. What a family's layers are (full names, full shapes, costs) is known from its config
// without building anything (ModelDescription, from the registry:
// runtime/setup/model_registry.h), which is what the stage partition is cut from.
//
// Initialisation is by name: init_weights(seed) fills every parameter from the random stream
// keyed by (seed, its full name), element j of the full tensor taking counter j (tensor/rng.h),
// so a stage, a tp shard or one process get the same numbers for the same parameter.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/fp8_linear.h"
#include "runtime/nn/module.h"
#include "comm/communicator.h"
#include "runtime/common/shard_spec.h"
#include "tensor/rng.h"

namespace st::runtime {

// Layers [begin, end) of the full model's layer list; end −1: through the last layer.
struct LayerRange {
  int begin = 0;
  int end = -1;
  bool operator==(const LayerRange&) const = default;
};

// One layer of a model, described from the config alone.
struct LayerInfo {
  std::string scope;                                   // full-name prefix, e.g. "transformer.h.3"
  std::vector<std::pair<std::string, Shape>> params;  // full names and FULL shapes (tied copies included)
  double flops_per_token = 0;                          // forward, at the sequence length asked
  double param_bytes() const;                          // f32 bytes of params
};
// The shape facts of a decoder's blocks that memory and speed depend on beyond the parameters
// (what the planner's activation terms read: runtime/plan/memory_plan.h). Set by the decoder
// families (models/decoder/decoder.h); absent for models whose activations are not modelled.
struct DecoderShape {
  int64_t d_model = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  bool swiglu = false;            // gate and up (2F wide) instead of one F-wide up projection, GELU otherwise
  bool rmsnorm = false;           // RMSNorm (weight only) instead of LayerNorm (weight and bias)
  bool rotary = false;            // rotary positions (no position embedding)
  bool tied_head = true;          // the head's weight is the token embedding's
  double embd_pdrop = 0, resid_pdrop = 0;
};
struct ModelDescription {
  std::vector<LayerInfo> layers;  // every layer of the full model, in order
  int64_t vocab_size = 0, context_length = 0;
  std::optional<DecoderShape> decoder;  // the decoder families' block shape (see above)
};

// What runs each layer's forward on the model's behalf when set (LanguageModel::set_layer_hook):
// ZeRO-3 (runtime/parallel/zero3.h) gathers the layer's parameters just before it and frees
// them after, and attaches the gather of its backward. `run` is the layer's own forward
// (recomputed or not); [begin, end) the slice forward_layers runs, i in it.
class LayerHook {
 public:
  virtual ~LayerHook() = default;
  virtual Tensor forward(size_t i, size_t begin, size_t end, const Tensor& x,
                         const std::function<Tensor(const Tensor&)>& run) = 0;
};

class LanguageModel : public Module {
 public:
  // The layers this object holds (all, or a pipeline stage's ranges), in model order.
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  // The ranges held (ends resolved): {{0, total_layers()}} for a whole model.
  const std::vector<LayerRange>& ranges() const { return ranges_; }
  int global_layer(size_t i) const { return global_.at(i); }  // full-model index of layers()[i]
  int total_layers() const { return total_layers_; }           // layers of the full model
  bool holds_first() const { return !global_.empty() && global_.front() == 0; }
  bool holds_last() const { return !global_.empty() && global_.back() + 1 == total_layers_; }
  bool holds_all() const { return static_cast<int>(layers_.size()) == total_layers_; }
  // Fills every parameter from its keyed stream (see above); the family's rule says which
  // distribution (normal with a per-name std, zeros, ones). Default: init_parameter for each
  // parameter, whole.
  virtual void init_weights(uint64_t seed);
  // Writes into `t` (contiguous, any shape) elements [first, first + t.numel()) of this object's
  // parameter `name` — its local tensor (a tp shard under tp), flattened row-major — exactly as
  // init_weights draws them. A ZeRO-3 rank draws its pieces so, without the rest of the parameter
  // (runtime/parallel/zero3.h). Default: ValueError (a family that does not say).
  virtual void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const;
  // tokens (B, T) i64 → logits (B, T, V) (chunked head: hidden (B, T, C)): every layer in order (one range held; a stage of
  // several runs them one by one: runtime/pipeline/stage_model.h).
  Tensor forward(const Tensor& tokens);
  // Layers [begin, end) on x; with recompute on, each recomputable layer keeps only its input
  // and runs again in backward (runtime/nn/recompute.h): same numbers, less memory.
  Tensor forward_layers(const Tensor& x, size_t begin, size_t end);
  void set_recompute(bool on) { recompute_ = on; }
  void set_layer_hook(std::shared_ptr<LayerHook> hook) { hook_ = std::move(hook); }  // null: none
  bool recompute() const { return recompute_; }
  // layers()[i] is recomputed (when recompute is on): every layer but the full model's first
  // and last, which hold the tied embedding (its gradient hook must fire once).
  virtual bool recomputable(size_t i) const;

  virtual std::string family() const = 0;    // the registry's name (models/register.cpp)
  virtual int64_t vocab_size() const = 0;
  virtual int64_t context_length() const = 0;  // longest sequence the model accepts
  // The repeated layers a user counts (--layers): the decoders' blocks, the MLP's hidden layers.
  // Default: every layer of the full model.
  virtual int64_t depth() const { return total_layers(); }
  // What rebuilds the model: for the decoders the Hugging Face config.json, else our own fields.
  virtual nlohmann::json config_json() const = 0;
  // Full names of parameters held by more than one layer.
  std::vector<std::string> tied_names() const;
  // Forward FLOPs per token of the whole model at sequence length T (sum of the layers' costs).
  double flops_per_token(int64_t seq_len) const;
  // The generator the model's dropouts draw from (shared by all layers; null when the model has
  // no randomness). The trainer checkpoints its (seed, offset).
  const std::shared_ptr<Generator>& generator() const { return gen_; }

  // Mean cross-entropy of this model's logits against targets (B, T) → () f32. A tensor-parallel
  // model's logits are a vocabulary shard and its loss is collective over the tp group. With the
  // chunked head on, `logits` is the last layer's hidden output (B, T, C) (see the top).
  virtual Tensor loss(const Tensor& logits, const Tensor& targets) const;
  // The chunked head (ModelForm::chunked_head, chosen at build): forward() returns the last
  // layer's hidden state and loss() runs the projection fused with the cross-entropy. False for a
  // family without that form and for the tensor-parallel GPT (its vocabulary-parallel loss is
  // collective).
  virtual bool chunked_head() const { return false; }
  // The scaling states of the model's FP8 GEMMs, in layer order (empty when off): the metrics' source.
  virtual std::vector<std::shared_ptr<ops::Fp8LinearState>> fp8_states() const { return {}; }
  // The same states named by their GEMM's full name, "<layer scope>.<gemm>" (e.g.
  // "transformer.h.3.qkv"): unique across the pipeline's stages (the checkpoint's keys).
  using NamedFp8States = std::vector<std::pair<std::string, std::shared_ptr<ops::Fp8LinearState>>>;
  virtual NamedFp8States fp8_named_states() const { return {}; }
  // Loads full tensors by name (a checkpoint's model.safetensors); a tensor-parallel model keeps
  // its shards. Default: load_state_dict.
  virtual void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict = true);
  // How each parameter splits over a tp group (null: every parameter whole on every rank).
  virtual ShardRule shard_rule() const { return nullptr; }
  // The tp group the model is split over (null: none).
  virtual std::shared_ptr<comm::Communicator> tensor_parallel_group() const { return nullptr; }

 protected:
  // The ranges this object will hold of a `total`-layer model (before add_layer, which then
  // takes exactly their layers in order; empty: all; a model that never calls it holds all the
  // layers it adds). Throws ValueError for an empty, out-of-bounds, overlapping or out-of-order
  // range. Returns the full-model indices of the layers to add, in order.
  std::vector<int> set_layer_ranges(std::vector<LayerRange> ranges, int total);
  // Appends `layer` as the next layer, registered (and scoped) under `scope`.
  void add_layer(const std::string& scope, std::shared_ptr<Layer> layer);
  void set_generator(std::shared_ptr<Generator> g) { gen_ = std::move(g); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<LayerRange> ranges_;
  std::vector<int> global_;  // layers()[i] is the full model's layer global_[i] (all of them once set)
  int total_layers_ = 0;
  bool range_set_ = false;
  std::shared_ptr<Generator> gen_;
  bool recompute_ = false;
  std::shared_ptr<LayerHook> hook_;
};

}  // namespace st::runtime
