// MLP language model (see the header).
#include "models/mlp_lm.h"

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"

namespace st::models {
MlpEmbedding::MlpEmbedding(int64_t vocab, int64_t d) {
  emb = register_module("", std::make_shared<Embedding>(vocab, d));
}
Tensor MlpEmbedding::forward(const Tensor& ids) {
  ST_CHECK(ids.dim() == 2, ShapeError, "MLP: token ids must be (B, T), got " << shape_str(ids.shape()));
  return emb->forward(ids);
}
runtime::LayerCost MlpEmbedding::cost(int64_t) const { return {static_cast<double>(param_bytes()), 0.0}; }

MlpHidden::MlpHidden(int64_t d) { fc = register_module("", std::make_shared<Linear>(d, d)); }
Tensor MlpHidden::forward(const Tensor& x) { return ops::relu(fc->forward(x)); }
runtime::LayerCost MlpHidden::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(fc->weight.numel())};
}

MlpHead::MlpHead(int64_t d, int64_t vocab) { fc = register_module("", std::make_shared<Linear>(d, vocab)); }
Tensor MlpHead::forward(const Tensor& h) { return fc->forward(h); }
runtime::LayerCost MlpHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(fc->weight.numel())};
}

namespace {
void check_config(const MlpConfig& c) {
  ST_CHECK(c.vocab >= 1 && c.d_model >= 1 && c.layers >= 0, ValueError,
           "MLP: sizes must be positive (vocab " << c.vocab << ", d_model " << c.d_model << ", layers " << c.layers
                                                << ")");
}
}  // namespace

MlpLm::MlpLm(const MlpConfig& c, std::vector<runtime::LayerRange> ranges) : cfg_(c) {
  check_config(c);
  for (int i : set_layer_ranges(std::move(ranges), static_cast<int>(c.layers) + 2)) {
    if (i == 0)
      add_layer("embedding", std::make_shared<MlpEmbedding>(c.vocab, c.d_model));
    else if (i <= c.layers)
      add_layer("hidden." + std::to_string(i - 1), std::make_shared<MlpHidden>(c.d_model));
    else
      add_layer("head", std::make_shared<MlpHead>(c.d_model, c.vocab));
  }
}

void MlpLm::init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const {
  NoGradGuard ng;
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
    t.fill_(0.0);
  else
    init_normal(t, name, seed, 0.02f, first, parameter(name).numel());
}

runtime::ModelDescription MlpLm::describe(const MlpConfig& c) {
  check_config(c);
  const int64_t C = c.d_model, V = c.vocab;
  runtime::ModelDescription d;
  d.vocab_size = V;
  d.context_length = c.max_len;
  d.layers.push_back({"embedding", {{"embedding.weight", {V, C}}}, 0.0});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "hidden." + std::to_string(i);
    d.layers.push_back({p, {{p + ".weight", {C, C}}, {p + ".bias", {C}}}, 2.0 * static_cast<double>(C * C)});
  }
  d.layers.push_back({"head", {{"head.weight", {C, V}}, {"head.bias", {V}}}, 2.0 * static_cast<double>(C * V)});
  return d;
}

nlohmann::json MlpLm::config_json() const { return config_to_json(cfg_); }

nlohmann::json MlpLm::config_to_json(const MlpConfig& c) {
  return {{"model_type", "mlp"}, {"vocab", c.vocab}, {"d_model", c.d_model}, {"layers", c.layers},
          {"max_len", c.max_len}};
}

MlpConfig MlpLm::config_from_json(const nlohmann::json& j) {
  MlpConfig c;
  try {
    c.vocab = j.at("vocab").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.max_len = j.at("max_len").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(ValueError, "MLP config: " << e.what());
  }
  return c;
}

}  // namespace st::models
