// DecoderModel: a decoder-only language model built from its description (decoder_spec.h) —
// [DecoderEmbedding, DecoderBlock × L, DecoderHead] (decoder_layers.h) under the family's
// checkpoint names — for one process or a tensor-parallel group (the same class: the plan in
// decoder_tp_plan.h says what each rank holds), whole or a range of its layers (a pipeline stage).
// Layer indices: 0 the embedding, 1 … L the blocks, L + 1 the head. A tied head holds the
// embedding's tensor (registered under its name); a range with the head but not the embedding
// holds its own copy (the same name and initial values: the stage copy of the tied weight, whose
// gradient the pipeline sums with the first stage's).
//
// Under tp the model's forward returns THIS RANK'S VOCABULARY SHARD of the logits (B, T, Vp/tp):
// loss() is the vocabulary-parallel cross-entropy (equal to the cross-entropy of the full
// logits; collective), gather_logits() the full logits. Every rank of the tp group runs the same
// calls in the same order; dropout masks are the same on every tp rank.
//
// Initialisation is by name: each parameter drawn from the stream keyed by (seed, its full name),
// element j of the FULL tensor taking counter j (tensor/rng.h), by the family's rule
// (DecoderSpec::init_std, scaled_residual_init); a tp shard or a ZeRO-3 piece draws only its
// elements, so every layout starts from the one-process weights.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "models/decoder/decoder_layers.h"
#include "models/decoder/decoder_spec.h"
#include "runtime/nn/language_model.h"

namespace st::models {

class DecoderModel : public runtime::LanguageModel {
 public:
  // Parameters start as zeros (norm weights one): call init_weights() or load a state dict.
  // `tp`: null or one rank for one process. ValueError when the spec is invalid or the plan cannot
  // split it over tp (DecoderSpec::check_tp says which tp would work). `form` (the run's plan,
  // runtime/nn/model_form.h), each layer built in it:
  //  - chunked_head (one rank): forward returns the final norm's output (B, T, C) and loss() is
  //    ops::lm_head_cross_entropy of it against the head's weight (no (B·T, V) logits); a range
  //    without the head keeps the flag for loss(), which it never runs; ignored under tp (the
  //    vocabulary-parallel loss needs every rank's logits);
  //  - fp8: every block's GEMMs (decoder_layers.h); the embedding and the head stay bf16;
  //  - sequence_parallel: ValueError with dropout in the spec (its masks are drawn per whole
  //    sequence) or a tp of one rank; the sequence length must divide by tp (the embedding checks
  //    it: ShapeError);
  //  - cp: the embedding adds the learned positions of the rank's chunks' global indices, each
  //    block's attention runs as a ring over the group with rotary positions at the global
  //    indices; ValueError with dropout in the spec or with sequence parallelism.
  DecoderModel(DecoderSpec spec, runtime::TpGroup tp, std::shared_ptr<Generator> gen,
               std::vector<runtime::LayerRange> layers = {}, const runtime::ModelForm& form = {});
  const DecoderSpec& spec() const { return spec_; }

  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override;
  std::string family() const override { return spec_.family; }
  int64_t vocab_size() const override { return spec_.vocab; }
  int64_t context_length() const override { return spec_.context; }
  int64_t depth() const override { return spec_.layers; }
  nlohmann::json config_json() const override { return spec_.hf_config; }  // the family's Hugging Face config.json

  bool chunked_head() const override { return chunked_; }
  std::vector<std::shared_ptr<ops::Fp8LinearState>> fp8_states() const override;
  NamedFp8States fp8_named_states() const override;  // "<block scope>.<qkv|o|up|down>"
  bool sequence_parallel() const { return sp_; }
  // logits (B, T, V or Vp/tp) — or with the chunked head hidden (B, T, C) — against targets
  // (B, T) → () f32, the mean over counted targets (-100 ignored); collective under tp.
  Tensor loss(const Tensor& out, const Tensor& targets) const override;

  // Full tensors by name → this rank's shards (checked before anything is written; strict:
  // unexpected keys throw). No communication.
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict = true) override;
  // Collective over the tp group: the full tensors by name (the one-process names, order, shapes).
  runtime::NamedTensors full_state_dict() const;
  Shape full_shape(const std::string& name) const;
  // logits (B, T, Vp/tp) → (B, T, V) on every rank (collective; differentiable); one rank: as is.
  Tensor gather_logits(const Tensor& local_logits) const;
  runtime::ShardRule shard_rule() const override;  // null without a tp group
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return tp_; }
  int tp_size() const { return runtime::tp_size(tp_); }

 private:
  void check_form(const runtime::ModelForm& form) const;  // the ValueErrors of the constructor's comment

  DecoderSpec spec_;
  runtime::TpGroup tp_;
  std::shared_ptr<DecoderHead> head_;  // null when this range does not hold the head
  std::vector<std::shared_ptr<DecoderBlock>> blocks_;  // the blocks held here, in order
  bool chunked_ = false;
  bool sp_ = false;
};

// Every layer's names, full shapes and forward FLOPs at sequence length T, from the spec alone.
runtime::ModelDescription describe_decoder(const DecoderSpec& s, int64_t seq_len);

}  // namespace st::models
