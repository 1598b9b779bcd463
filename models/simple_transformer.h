// The seed article's "SimpleTransformer": nn.Embedding → nn.TransformerEncoder(
// nn.TransformerEncoderLayer(d, heads), layers) → nn.Linear(d, vocab). PyTorch's encoder layer
// defaults: post-LayerNorm, ReLU feed-forward of width 2048, dropout 0.1, LN eps 1e-5:
//   x = norm1(x + drop(self_attn(x)));  x = norm2(x + drop(linear2(drop(relu(linear1(x))))))
// Trained here as a causal language model, so self-attention is causally masked (otherwise a
// position could read its own target). Like the seed, it has no positional encoding; dropout on
// the attention probabilities is not implemented (the residual and FFN dropouts are).
// Defaults: vocab 10000, d 256, 8 heads, 6 layers. Weights in our (in, out) layout, PyTorch-like
// names: embedding.weight, transformer_encoder.layers.{i}.self_attn.in_proj (C, 3C),
// .self_attn.out_proj (C, C), .linear1 (C, F), .linear2 (F, C), .norm1, .norm2, linear (C, V).
// Init: normal(0, 0.02) weights (each keyed by its name), zero biases, LN 1/0.
// Layers: 0 the embedding, 1 … layers the encoder layers, layers + 1 the head; a range of them
// may be built alone (a pipeline stage).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "models/nn.h"
#include "runtime/nn/language_model.h"

namespace st::models {

struct SimpleTransformerConfig {
  int64_t vocab = 10000, d_model = 256, heads = 8, layers = 6, ffn = 2048, max_len = 64;
  double dropout = 0.1, ln_eps = 1e-5;
};

class StEmbedding : public runtime::Layer {
 public:
  StEmbedding(int64_t vocab, int64_t d, int64_t max_len);
  Tensor forward(const Tensor& ids) override;  // ids (B, T) i64 → (B, T, d)
  runtime::LayerCost cost(int64_t) const override;
  std::shared_ptr<Embedding> emb;
  int64_t max_len;
};

class StEncoderLayer : public runtime::Layer {
 public:
  // `number`: the encoder layer's number (from 0), its dropout site.
  StEncoderLayer(int64_t d, int64_t heads, int64_t ffn, double dropout, double ln_eps, std::shared_ptr<Generator> gen,
                 int number);
  Tensor forward(const Tensor& x) override;  // x (B, T, d) → (B, T, d)
  runtime::LayerCost cost(int64_t seq_len) const override;
  std::shared_ptr<Linear> in_proj, out_proj, linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  int64_t d, heads, ffn;

 private:
  Dropout drop_;
};

class StHead : public runtime::Layer {
 public:
  StHead(int64_t d, int64_t vocab);
  Tensor forward(const Tensor& h) override;  // h (B, T, d) → logits (B, T, V)
  runtime::LayerCost cost(int64_t) const override;
  std::shared_ptr<Linear> linear;
};

class SimpleTransformer : public runtime::LanguageModel {
 public:
  SimpleTransformer(const SimpleTransformerConfig& c, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> layers = {});
  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override;
  static runtime::ModelDescription describe(const SimpleTransformerConfig& c, int64_t seq_len);
  const SimpleTransformerConfig& config() const { return cfg_; }
  std::string family() const override { return "simple-transformer"; }
  int64_t vocab_size() const override { return cfg_.vocab; }
  int64_t context_length() const override { return cfg_.max_len; }
  int64_t depth() const override { return cfg_.layers; }
  nlohmann::json config_json() const override;
  static SimpleTransformerConfig config_from_json(const nlohmann::json& j);
  static nlohmann::json config_to_json(const SimpleTransformerConfig& c);  // what config_json() returns

 private:
  SimpleTransformerConfig cfg_;
};

}  // namespace st::models
