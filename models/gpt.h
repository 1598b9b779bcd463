// GPT-2 (pre-LayerNorm, learned positions, tanh-GELU MLP of width 4C, tied embeddings), with
// Hugging Face's parameter names and Conv1D layouts so HF weights load without transposes:
//   transformer.wte.weight (V, C)            transformer.wpe.weight (n_positions, C)
//   transformer.h.{i}.ln_1.{weight,bias} (C) transformer.h.{i}.attn.c_attn.weight (C, 3C) bias (3C)
//   transformer.h.{i}.attn.c_proj (C, C)     transformer.h.{i}.ln_2.{weight,bias} (C)
//   transformer.h.{i}.mlp.c_fc (C, 4C)       transformer.h.{i}.mlp.c_proj (4C, C)
//   transformer.ln_f.{weight,bias} (C)       lm_head = wteᵀ (tied, not a separate tensor)
// Layers: [GptEmbedding(wte, wpe), GptBlock × L, GptHead(ln_f, tied wte)]. The head holds the
// same wte tensor as the embedding (registered under the same name); with pp > 1 the last
// stage's copy gets a gradient that must be summed with the first stage's (runtime/nn/language_model.h).
// Layer indices: 0 the embedding, 1 … L the blocks, L + 1 the head; a Gpt may hold a range of
// them (a pipeline stage). A range with the head but not the embedding holds its own wte tensor
// (the same name, the same initial values: the stage copy of the tied weight).
// Initialisation is HF's: normal(0, 0.02) for wte, wpe and every Conv1D weight, std
// 0.02/√(2L) for the residual projections (attn.c_proj, mlp.c_proj), biases 0, LayerNorm 1/0;
// each normal tensor drawn from its stream keyed by (seed, full name) (tensor/rng.h). Backward:
// ops write fresh gradients (=), parameters accumulate (+=) — the tied wte receives the sum of
// the embedding's and the head's.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "models/nn.h"
#include "runtime/nn/kv_cache.h"
#include "runtime/nn/language_model.h"

namespace st::models {

struct GptConfig {
  int64_t n_layer = 2, n_embd = 64, n_head = 4, vocab_size = 256, n_positions = 64;
  double layer_norm_epsilon = 1e-5;
  double embd_pdrop = 0.0, resid_pdrop = 0.0;  // attention-probability dropout is not implemented
};

class GptEmbedding : public runtime::Layer, public runtime::CachedLayer {
 public:
  GptEmbedding(const GptConfig& c, std::shared_ptr<Generator> gen);  // dropout site 0
  Tensor forward(const Tensor& ids) override;  // ids (B, T) i64 → wte[ids] + wpe[0..T) (B, T, C)
  // ids (B, T) → wte[ids] + wpe[step.positions] (B, T, C) (models/gpt_cached.cpp)
  Tensor forward_cached(const Tensor& ids, runtime::KvSlot& slot, const runtime::CacheStep& step) override;
  runtime::LayerCost cost(int64_t seq_len) const override;
  std::shared_ptr<Embedding> wte, wpe;

 private:
  Dropout drop_;
};

// One pre-LN block: x + attn(ln_1(x)); then + mlp(ln_2(x)). Widths are constructor arguments so
// a tensor-parallel block can hold heads/tp heads and ffn/tp MLP columns.
class GptBlock : public runtime::Layer, public runtime::CachedLayer {
 public:
  // `index`: the block's layer index in the model (1 + its number), its dropout site.
  GptBlock(int64_t n_embd, int64_t n_head, int64_t head_dim, int64_t ffn, double ln_eps, double resid_pdrop,
           std::shared_ptr<Generator> gen, int index);
  Tensor forward(const Tensor& x) override;  // x (B, T, C) → (B, T, C)
  // x (B, T, C) of the step's new positions → (B, T, C), attention over the cached ones
  Tensor forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) override;
  runtime::LayerCost cost(int64_t seq_len) const override;
  Tensor attention(const Tensor& h) const;  // h (B, T, C) → (B, T, C) (c_proj applied)
  Tensor mlp(const Tensor& h) const;        // h (B, T, C) → (B, T, C)

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Linear> c_attn, attn_proj, c_fc, mlp_proj;
  int64_t n_embd, n_head, head_dim, ffn;

 private:
  Dropout drop_;
};

// ln_f, then logits = h · wteᵀ. Chunked (Gpt::set_chunked_head): forward stops after ln_f and
// Gpt::loss applies wteᵀ fused with the cross-entropy (ops/lm_head_loss.h).
class GptHead : public runtime::Layer, public runtime::CachedLayer {
 public:
  GptHead(const GptConfig& c, Tensor wte);
  Tensor forward(const Tensor& h) override;  // h (B, T, C) → logits (B, T, V); chunked: ln_f(h) (B, T, C)
  Tensor logits(const Tensor& h) const;      // h (B, T, C) → logits (B, T, V), whatever `chunked`
  Tensor forward_cached(const Tensor& h, runtime::KvSlot&, const runtime::CacheStep&) override { return logits(h); }
  runtime::LayerCost cost(int64_t seq_len) const override;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor wte;  // (V, C), the embedding's tensor
  bool chunked = false;
};

// ValueError unless every size is positive and d_model divides by heads.
void check_gpt_config(const GptConfig& c);
// Forward FLOPs per token of one block: the four matmuls (attention width A, MLP width F) and
// the attention scores over T positions (causal half not discounted).
double gpt_block_flops(double C, double A, double F, double T);
// HF GPT-2 initialisation of one parameter by its full name (normal 0.02, residual projections
// 0.02/√(2L), biases 0, LayerNorm 1/0), from the stream keyed by (seed, name); `map` places t in
// the full tensor (a tp shard: runtime/common/shard_spec.h). Shared by Gpt and TpGpt, so a shard
// holds exactly its part of the unsplit model's tensor.
void gpt_init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t n_layer, const ElementMap& map);
// The Hugging Face config.json of a GPT of these sizes.
nlohmann::json gpt_hf_config_json(const GptConfig& c);
// The bos/eos id config.json names: GPT-2's <|endoftext|> (50256) for a vocabulary that holds
// GPT-2's BPE ids (50257, or padded: 50304), else the vocabulary's last id.
int64_t gpt_end_of_text(int64_t vocab_size);
// Every layer's names, full shapes and forward FLOPs at sequence length T.
runtime::ModelDescription describe_gpt(const GptConfig& c, int64_t seq_len);

class Gpt : public runtime::LanguageModel {
 public:
  // Parameters are zeros / LN ones; call init_weights() or load a state dict.
  Gpt(const GptConfig& c, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> layers = {});
  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override;
  const GptConfig& config() const { return cfg_; }
  std::string family() const override { return "gpt"; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t context_length() const override { return cfg_.n_positions; }
  nlohmann::json config_json() const override;  // Hugging Face config.json (models/hf_gpt2.h)
  // Chunked head: forward returns ln_f's output (B, T, C) and loss() is
  // ops::lm_head_cross_entropy of it against wte (no (B·T, V) logits). A range without the head
  // keeps the flag for loss(), which it never runs.
  void set_chunked_head(bool on) override;
  bool chunked_head() const override { return chunked_; }
  // logits (B, T, V), or with the chunked head hidden (B, T, C), against targets (B, T) → () f32
  Tensor loss(const Tensor& out, const Tensor& targets) const override;

 private:
  GptConfig cfg_;
  std::shared_ptr<GptHead> head_;  // null when this range does not hold the head
  bool chunked_ = false;
};

}  // namespace st::models
