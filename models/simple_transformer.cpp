// The seed's SimpleTransformer as a causal language model (see the header).
#include "models/simple_transformer.h"

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"

namespace st::models {
StEmbedding::StEmbedding(int64_t vocab, int64_t d, int64_t ml) : max_len(ml) {
  emb = register_module("embedding", std::make_shared<Embedding>(vocab, d));
}

Tensor StEmbedding::forward(const Tensor& ids) {
  ST_CHECK(ids.dim() == 2, ShapeError, "SimpleTransformer: token ids must be (B, T), got " << shape_str(ids.shape()));
  return emb->forward(ids);  // (B, T, d)
}

runtime::LayerCost StEmbedding::cost(int64_t) const { return {static_cast<double>(param_bytes()), 0.0}; }

StEncoderLayer::StEncoderLayer(int64_t d_, int64_t h, int64_t f, double dropout, double ln_eps,
                               std::shared_ptr<Generator> gen)
    : d(d_), heads(h), ffn(f), drop_(dropout, std::move(gen)) {
  ST_CHECK(d % h == 0, ValueError, "SimpleTransformer: d_model " << d << " is not divisible by heads " << h);
  in_proj = register_module("self_attn.in_proj", std::make_shared<Linear>(d, 3 * d));
  out_proj = register_module("self_attn.out_proj", std::make_shared<Linear>(d, d));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, f));
  linear2 = register_module("linear2", std::make_shared<Linear>(f, d));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d, ln_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d, ln_eps));
}

Tensor StEncoderLayer::forward(const Tensor& x) {
  ST_CHECK(x.dim() == 3 && x.size(2) == d, ShapeError,
           "SimpleTransformer layer: input must be (B, T, " << d << "), got " << shape_str(x.shape()));
  const bool tr = is_training();
  // post-LN: x = norm1(x + drop(attn(x)))        x (B, T, d)
  Tensor a = out_proj->forward(causal_self_attention(in_proj->forward(x), heads, d / heads));
  Tensor h = norm1->forward(ops::add(x, drop_.forward(a, tr)));
  // x = norm2(x + drop(linear2(drop(relu(linear1(x))))))   hidden (B, T, F)
  Tensor f = linear2->forward(drop_.forward(ops::relu(linear1->forward(h)), tr));
  return norm2->forward(ops::add(h, drop_.forward(f, tr)));
}

runtime::LayerCost StEncoderLayer::cost(int64_t seq_len) const {
  const double D = static_cast<double>(d), F = static_cast<double>(ffn), T = static_cast<double>(seq_len);
  return {static_cast<double>(param_bytes()), 2.0 * (4 * D * D + 2 * D * F) + 4.0 * T * D};
}

StHead::StHead(int64_t d, int64_t vocab) { linear = register_module("linear", std::make_shared<Linear>(d, vocab)); }

Tensor StHead::forward(const Tensor& h) { return linear->forward(h); }  // (B, T, d) → (B, T, V)

runtime::LayerCost StHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(linear->weight.numel())};
}

SimpleTransformer::SimpleTransformer(const SimpleTransformerConfig& c, std::shared_ptr<Generator> gen) : cfg_(c) {
  ST_CHECK(c.vocab >= 1 && c.d_model >= 1 && c.heads >= 1 && c.layers >= 1 && c.ffn >= 1, ValueError,
           "SimpleTransformer: sizes must be positive");
  set_generator(gen);
  add_layer("", std::make_shared<StEmbedding>(c.vocab, c.d_model, c.max_len));
  for (int64_t i = 0; i < c.layers; ++i)
    add_layer("transformer_encoder.layers." + std::to_string(i),
              std::make_shared<StEncoderLayer>(c.d_model, c.heads, c.ffn, c.dropout, c.ln_eps, gen));
  add_layer("", std::make_shared<StHead>(c.d_model, c.vocab));
}

void SimpleTransformer::init_weights(Generator& gen) {
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p.detach();
    bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find(".norm") != std::string::npos)
      t.fill_(is_bias ? 0.0 : 1.0);
    else if (is_bias)
      t.fill_(0.0);
    else
      fill_normal(t, gen, 0.f, 0.02f);
  }
}

nlohmann::json SimpleTransformer::config_json() const {
  return {{"model_type", "simple-transformer"}, {"vocab", cfg_.vocab},     {"d_model", cfg_.d_model},
          {"heads", cfg_.heads},                {"layers", cfg_.layers},   {"ffn", cfg_.ffn},
          {"max_len", cfg_.max_len},            {"dropout", cfg_.dropout}, {"ln_eps", cfg_.ln_eps}};
}

SimpleTransformerConfig SimpleTransformer::config_from_json(const nlohmann::json& j) {
  SimpleTransformerConfig c;
  try {
    c.vocab = j.at("vocab").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.heads = j.at("heads").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.ffn = j.at("ffn").get<int64_t>();
    c.max_len = j.at("max_len").get<int64_t>();
    c.dropout = j.at("dropout").get<double>();
    c.ln_eps = j.at("ln_eps").get<double>();
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(ValueError, "SimpleTransformer config: " << e.what());
  }
  return c;
}

}  // namespace st::models
