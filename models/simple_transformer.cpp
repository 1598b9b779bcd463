// The seed's SimpleTransformer as a causal language model (see the header).
#include "models/simple_transformer.h"

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"

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
                               std::shared_ptr<Generator> gen, int number)
    : d(d_), heads(h), ffn(f), drop_(dropout, std::move(gen), static_cast<uint64_t>(number)) {
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
  // post-LN: x = norm1(x + drop(attn(x)))        x (B, T, d); each norm with its dropout and
  // residual add as one op (ops/add_layernorm.h)
  Tensor a = out_proj->forward(causal_self_attention(in_proj->forward(x), heads, d / heads));
  Tensor h = drop_.add_layernorm(x, a, *norm1, tr).y;
  // x = norm2(x + drop(linear2(drop(relu(linear1(x))))))   hidden (B, T, F)
  Tensor f = linear2->forward(drop_.forward(ops::relu(linear1->forward(h)), tr));
  return drop_.add_layernorm(h, f, *norm2, tr).y;
}

namespace {
double encoder_layer_flops(double D, double F, double T) { return 2.0 * (4 * D * D + 2 * D * F) + 4.0 * T * D; }
}  // namespace

runtime::LayerCost StEncoderLayer::cost(int64_t seq_len) const {
  return {static_cast<double>(param_bytes()),
          encoder_layer_flops(static_cast<double>(d), static_cast<double>(ffn), static_cast<double>(seq_len))};
}

StHead::StHead(int64_t d, int64_t vocab) { linear = register_module("linear", std::make_shared<Linear>(d, vocab)); }

Tensor StHead::forward(const Tensor& h) { return linear->forward(h); }  // (B, T, d) → (B, T, V)

runtime::LayerCost StHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(linear->weight.numel())};
}

namespace {
void check_config(const SimpleTransformerConfig& c) {
  ST_CHECK(c.vocab >= 1 && c.d_model >= 1 && c.heads >= 1 && c.layers >= 1 && c.ffn >= 1, ValueError,
           "SimpleTransformer: sizes must be positive");
}
}  // namespace

SimpleTransformer::SimpleTransformer(const SimpleTransformerConfig& c, std::shared_ptr<Generator> gen,
                                     std::vector<runtime::LayerRange> ranges)
    : cfg_(c) {
  check_config(c);
  set_generator(gen);
  for (int i : set_layer_ranges(std::move(ranges), static_cast<int>(c.layers) + 2)) {
    if (i == 0)
      add_layer("", std::make_shared<StEmbedding>(c.vocab, c.d_model, c.max_len));
    else if (i <= c.layers)
      add_layer("transformer_encoder.layers." + std::to_string(i - 1),
                std::make_shared<StEncoderLayer>(c.d_model, c.heads, c.ffn, c.dropout, c.ln_eps, gen, i - 1));
    else
      add_layer("", std::make_shared<StHead>(c.d_model, c.vocab));
  }
}

void SimpleTransformer::init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const {
  NoGradGuard ng;
  const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (name.find(".norm") != std::string::npos)
    t.fill_(is_bias ? 0.0 : 1.0);
  else if (is_bias)
    t.fill_(0.0);
  else
    init_normal(t, name, seed, 0.02f, first, parameter(name).numel());
}

runtime::ModelDescription SimpleTransformer::describe(const SimpleTransformerConfig& c, int64_t seq_len) {
  check_config(c);
  const int64_t D = c.d_model, F = c.ffn, V = c.vocab;
  runtime::ModelDescription d;
  d.vocab_size = V;
  d.context_length = c.max_len;
  d.layers.push_back({"", {{"embedding.weight", {V, D}}}, 0.0});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "transformer_encoder.layers." + std::to_string(i);
    d.layers.push_back({p,
                        {{p + ".self_attn.in_proj.weight", {D, 3 * D}},
                         {p + ".self_attn.in_proj.bias", {3 * D}},
                         {p + ".self_attn.out_proj.weight", {D, D}},
                         {p + ".self_attn.out_proj.bias", {D}},
                         {p + ".linear1.weight", {D, F}},
                         {p + ".linear1.bias", {F}},
                         {p + ".linear2.weight", {F, D}},
                         {p + ".linear2.bias", {D}},
                         {p + ".norm1.weight", {D}},
                         {p + ".norm1.bias", {D}},
                         {p + ".norm2.weight", {D}},
                         {p + ".norm2.bias", {D}}},
                        encoder_layer_flops(static_cast<double>(D), static_cast<double>(F), static_cast<double>(seq_len))});
  }
  d.layers.push_back({"", {{"linear.weight", {D, V}}, {"linear.bias", {V}}}, 2.0 * static_cast<double>(D * V)});
  return d;
}

nlohmann::json SimpleTransformer::config_json() const { return config_to_json(cfg_); }

nlohmann::json SimpleTransformer::config_to_json(const SimpleTransformerConfig& c) {
  return {{"model_type", "simple-transformer"}, {"vocab", c.vocab},     {"d_model", c.d_model},
          {"heads", c.heads},                {"layers", c.layers},   {"ffn", c.ffn},
          {"max_len", c.max_len},            {"dropout", c.dropout}, {"ln_eps", c.ln_eps}};
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
