// Tensor-parallel GPT-2 (Megatron layout) over a tp group: the GPT of models/gpt.h with every
// matmul split across the group's ranks, holding shards under the full model's parameter names
// (models/gpt_shard_rule.h):
//   transformer.wte.weight (Vp/tp, C)        VocabParallelEmbedding rows, V padded to Vp = k·tp
//   transformer.wpe.weight (n_positions, C)  replicated
//   transformer.h.{i}.ln_1 / ln_2 (C)        replicated
//   transformer.h.{i}.attn.c_attn (C, 3C/tp) this rank's q, k, v columns of heads [r·H/tp, ...)
//   transformer.h.{i}.attn.c_proj (C/tp, C)  rows; bias (C) replicated, added after the all-reduce
//   transformer.h.{i}.mlp.c_fc (C, 4C/tp)    columns      mlp.c_proj (4C/tp, C) rows, bias replicated
//   transformer.ln_f (C)                     replicated; lm_head = the local wte shardᵀ (tied)
// Layers: [TpGptEmbedding, TpGptBlock × L, TpGptHead], registered in Gpt's order, so
// named_parameters() lists the same names in the same order as Gpt's; like Gpt, a TpGpt may
// hold a range of them (a pipeline stage of a tp × pp grid).
//
// forward(tokens (B, T)) returns THIS RANK'S VOCABULARY SHARD of the logits, (B, T, Vp/tp):
// compute the loss with loss() (vocab-parallel cross-entropy, equal to ops::cross_entropy on
// the full logits) or get the full logits with gather_logits(). Per block there are 2
// all-reduces in forward (attn and MLP outputs) and 2 in backward (their inputs' gradients),
// plus one each for embedding, head and loss. Every rank of the tp group must run the same
// calls in the same order (the tokens and targets are the same on every tp rank).
// Dropout masks are the same on every tp rank (same generator, same draws), as they must be
// on replicated activations.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "models/nn.h"
#include "runtime/nn/language_model.h"
#include "runtime/parallel/tp_layers.h"
#include "models/gpt_shard_rule.h"
#include "runtime/parallel/tp_shard.h"

namespace st::models {

class TpGptEmbedding : public runtime::Layer, public runtime::CachedLayer {
 public:
  TpGptEmbedding(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen);
  Tensor forward(const Tensor& ids) override;  // ids (B, T) i64 → wte[ids] + wpe[0..T) (B, T, C) replicated
  Tensor forward_cached(const Tensor& ids, runtime::KvSlot& slot, const runtime::CacheStep& step) override;  // wpe[step.positions]
  runtime::LayerCost cost(int64_t seq_len) const override;
  std::shared_ptr<runtime::VocabParallelEmbedding> wte;
  std::shared_ptr<Embedding> wpe;

 private:
  Dropout drop_;
};

class TpGptBlock : public runtime::Layer, public runtime::CachedLayer {
 public:
  TpGptBlock(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen, int index);  // index: as GptBlock's
  Tensor forward(const Tensor& x) override;                 // x (B, T, C) replicated → (B, T, C) replicated
  // as forward, this rank's heads attending over their cached keys (the cache splits by heads too)
  Tensor forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) override;
  runtime::LayerCost cost(int64_t seq_len) const override;  // this rank's share
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<runtime::TpSelfAttention> attn;
  std::shared_ptr<runtime::TpMlp> mlp;

 private:
  int64_t n_embd_;
  Dropout drop_;
};

class TpGptHead : public runtime::Layer, public runtime::CachedLayer {
 public:
  TpGptHead(const GptConfig& c, runtime::TpGroup tp, Tensor wte_shard);
  Tensor forward(const Tensor& h) override;  // h (B, T, C) → ln_f → copy_to_tp → · wte_shardᵀ → (B, T, Vp/tp)
  Tensor forward_cached(const Tensor& h, runtime::KvSlot&, const runtime::CacheStep&) override { return forward(h); }
  runtime::LayerCost cost(int64_t seq_len) const override;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor wte;  // (Vp/tp, C), the embedding's shard (tied)

 private:
  runtime::TpGroup tp_;
};

class TpGpt : public runtime::LanguageModel {
 public:
  // Throws ValueError unless heads and 4C divide by the group size (d_model by heads as for Gpt).
  // Parameters start as zeros / LN ones: call init_weights() or load_full_state_dict().
  TpGpt(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> layers = {});

  // Each shard draws only its own elements of the full tensor's keyed stream (the shard's
  // ElementMap), padding rows zero: a TpGpt initialised from a seed equals the Gpt initialised
  // from the same seed, sharded. No communication.
  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override;
  // Full tensors by name (HF layout, e.g. a checkpoint's model.safetensors) → this rank's shards.
  // strict: unexpected keys throw (missing keys and wrong full shapes always do). No communication.
  void load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict = true) override;
  // Collective over the tp group: every rank gets the full tensors by name (Gpt's names, order
  // and shapes). The local shards themselves are state_dict().
  runtime::NamedTensors full_state_dict() const;
  // Full shape of each parameter (what load_full_state_dict expects and full_state_dict returns).
  Shape full_shape(const std::string& name) const;
  runtime::ShardRule shard_rule() const override { return gpt_tp_shard_rule(cfg_.vocab_size); }
  std::shared_ptr<comm::Communicator> tensor_parallel_group() const override { return tp_; }

  // logits (B, T, Vp/tp) from forward, targets (B, T) → mean cross-entropy () f32 over the full
  // vocabulary, the same on every tp rank (collective).
  // Targets equal to -100 are ignored (ops::cross_entropy's default). There is no chunked form of
  // this head (set_chunked_head is ignored: the loss needs the row max and Σ exp of every rank's
  // shard), so --chunked-head leaves tp > 1 on these logits.
  Tensor loss(const Tensor& local_logits, const Tensor& targets) const override;
  // logits (B, T, Vp/tp) → (B, T, V) full logits on every rank (collective; differentiable).
  Tensor gather_logits(const Tensor& local_logits) const;

  const GptConfig& config() const { return cfg_; }
  const runtime::TpGroup& tp_group() const { return tp_; }
  int64_t padded_vocab() const { return runtime::pad_vocab(cfg_.vocab_size, runtime::tp_size(tp_)); }
  std::string family() const override { return "gpt"; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t context_length() const override { return cfg_.n_positions; }
  nlohmann::json config_json() const override;  // the full model's HF config.json

 private:
  GptConfig cfg_;
  runtime::TpGroup tp_;
};

}  // namespace st::models
