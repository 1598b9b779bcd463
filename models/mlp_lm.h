// MLP language model: each position predicts the next token from its own token only
// (a learned bigram model with depth) — the smallest model that trains through the same data,
// loss and optimizer path as the transformers.
//   embedding.weight (V, C) → hidden.{i}: relu(x · weight (C, C) + bias) × L → head (C, V)
// Init: normal(0, 0.02) weights (each keyed by its name), zero biases. Layers: 0 the embedding,
// 1 … layers the hidden layers, layers + 1 the head; a range of them may be built alone.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "models/nn.h"
#include "runtime/nn/language_model.h"

namespace st::models {

struct MlpConfig {
  int64_t vocab = 256, d_model = 64, layers = 2, max_len = 64;
};

class MlpEmbedding : public runtime::Layer {
 public:
  MlpEmbedding(int64_t vocab, int64_t d);
  Tensor forward(const Tensor& ids) override;  // ids (B, T) i64 → (B, T, C)
  runtime::LayerCost cost(int64_t) const override;
  std::shared_ptr<Embedding> emb;
};

class MlpHidden : public runtime::Layer {
 public:
  explicit MlpHidden(int64_t d);
  Tensor forward(const Tensor& x) override;  // x (B, T, C) → relu(linear(x)) (B, T, C)
  runtime::LayerCost cost(int64_t) const override;
  std::shared_ptr<Linear> fc;
};

class MlpHead : public runtime::Layer {
 public:
  MlpHead(int64_t d, int64_t vocab);
  Tensor forward(const Tensor& h) override;  // h (B, T, C) → logits (B, T, V)
  runtime::LayerCost cost(int64_t) const override;
  std::shared_ptr<Linear> fc;
};

class MlpLm : public runtime::LanguageModel {
 public:
  explicit MlpLm(const MlpConfig& c, std::vector<runtime::LayerRange> layers = {});
  void init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const override;
  static runtime::ModelDescription describe(const MlpConfig& c);
  std::string family() const override { return "mlp"; }
  int64_t vocab_size() const override { return cfg_.vocab; }
  int64_t context_length() const override { return cfg_.max_len; }
  int64_t depth() const override { return cfg_.layers; }
  nlohmann::json config_json() const override;
  static MlpConfig config_from_json(const nlohmann::json& j);
  static nlohmann::json config_to_json(const MlpConfig& c);  // what config_json() returns

 private:
  MlpConfig cfg_;
};

}  // namespace st::models
