// Registers the model families with runtime/setup/model_registry.h. st_models is an OBJECT library,
// so this file's static registrar is part of every program that links st_models.
#include <memory>

#include "models/gpt.h"
#include "models/gpt_shard_rule.h"
#include "models/gpt_tp.h"
#include "models/hf_gpt2.h"
#include "models/mlp_lm.h"
#include "models/simple_transformer.h"
#include "runtime/common/json_io.h"
#include "runtime/setup/model_registry.h"

namespace st::models {
namespace {

int64_t seq_or(const runtime::TrainConfig& cfg, int64_t dflt) { return cfg.seq_len > 0 ? cfg.seq_len : dflt; }

std::shared_ptr<Generator> dropout_generator(const runtime::ModelBuild& b) {
  return std::make_shared<Generator>(b.dropout_seed, 0);
}

bool split(const runtime::ModelBuild& b) { return b.tp && b.tp->size() > 1; }

// ---- gpt --------------------------------------------------------------------------------------

nlohmann::json gpt_options(const runtime::TrainConfig& cfg) {
  GptConfig c;
  if (!cfg.init_from.empty()) {
    const std::string path = cfg.init_from + "/config.json";
    c = gpt_config_from_hf(runtime::read_json_file(path), path);
  } else {
    c.n_layer = cfg.layers;
    c.n_embd = cfg.d_model;
    c.n_head = cfg.heads;
    c.vocab_size = cfg.vocab;
    c.n_positions = seq_or(cfg, 64);
  }
  if (cfg.dropout >= 0) c.embd_pdrop = c.resid_pdrop = cfg.dropout;
  return gpt_hf_config_json(c);
}

std::shared_ptr<runtime::LanguageModel> gpt_build(const nlohmann::json& j, const runtime::ModelBuild& b) {
  const GptConfig c = gpt_config_from_hf(j, "model config");
  if (split(b)) return std::make_shared<TpGpt>(c, b.tp, dropout_generator(b), b.layers);
  return std::make_shared<Gpt>(c, dropout_generator(b), b.layers);
}

// ---- simple-transformer, mlp ------------------------------------------------------------------

nlohmann::json st_options(const runtime::TrainConfig& cfg) {
  SimpleTransformerConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.heads = cfg.heads;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  if (cfg.dropout >= 0) c.dropout = cfg.dropout;
  return SimpleTransformer::config_to_json(c);
}

nlohmann::json mlp_options(const runtime::TrainConfig& cfg) {
  MlpConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  return MlpLm::config_to_json(c);
}

// Closed forms of each family's parameter count, for the memory check before a byte is allocated
// (runtime/plan/memory_check.h; tests/runtime/plan/test_memory_check.cpp checks them against the
// built models). GPT: per block 12·C² + 13·C (attention 4·C² + 4·C, MLP 8·C² + 5·C, two LayerNorms 4·C); embeddings
// C·(V + T); the final LayerNorm 2·C; the head is tied.
double gpt_param_count(const nlohmann::json& j) {
  const GptConfig c = gpt_config_from_hf(j, "model config");
  const double L = static_cast<double>(c.n_layer), C = static_cast<double>(c.n_embd);
  const double V = static_cast<double>(c.vocab_size), T = static_cast<double>(c.n_positions);
  return 12 * L * C * C + 13 * L * C + C * (V + T) + 2 * C;
}
// Embedding V·C; per layer attention 4·C² + 4·C, feed-forward 2·C·F + F + C, two LayerNorms 4·C;
// head C·V + V.
double st_param_count(const nlohmann::json& j) {
  const SimpleTransformerConfig c = SimpleTransformer::config_from_json(j);
  const double L = static_cast<double>(c.layers), C = static_cast<double>(c.d_model);
  const double V = static_cast<double>(c.vocab), F = static_cast<double>(c.ffn);
  return V * C + L * (4 * C * C + 2 * C * F + F + 9 * C) + C * V + V;
}
// Embedding V·C; per hidden layer C² + C; head C·V + V.
double mlp_param_count(const nlohmann::json& j) {
  const MlpConfig c = MlpLm::config_from_json(j);
  const double L = static_cast<double>(c.layers), C = static_cast<double>(c.d_model);
  const double V = static_cast<double>(c.vocab);
  return V * C + L * (C * C + C) + C * V + V;
}

// The flags that make each family's config (ModelFactory::options_of).
runtime::ModelOptions gpt_flags(const nlohmann::json& j) {
  const GptConfig c = gpt_config_from_hf(j, "model config");
  runtime::ModelOptions m;
  m.model = "gpt";
  m.layers = c.n_layer;
  m.d_model = c.n_embd;
  m.heads = c.n_head;
  m.vocab = c.vocab_size;
  m.seq_len = c.n_positions;
  m.dropout = c.embd_pdrop == c.resid_pdrop ? c.embd_pdrop : -1;  // --dropout sets both
  return m;
}
runtime::ModelOptions st_flags(const nlohmann::json& j) {
  const SimpleTransformerConfig c = SimpleTransformer::config_from_json(j);
  runtime::ModelOptions m;
  m.model = "simple-transformer";
  m.layers = c.layers;
  m.d_model = c.d_model;
  m.heads = c.heads;
  m.vocab = c.vocab;
  m.seq_len = c.max_len;
  m.dropout = c.dropout;
  return m;
}
runtime::ModelOptions mlp_flags(const nlohmann::json& j) {
  const MlpConfig c = MlpLm::config_from_json(j);
  runtime::ModelOptions m;
  m.model = "mlp";
  m.layers = c.layers;
  m.d_model = c.d_model;
  m.vocab = c.vocab;
  m.seq_len = c.max_len;
  return m;
}

struct Registrar {
  Registrar() {
    runtime::register_model(
        "gpt", {gpt_options,
                [](const nlohmann::json& j, int64_t T) { return describe_gpt(gpt_config_from_hf(j, "model config"), T); },
                gpt_build, load_hf_gpt2_weights, /*tensor_parallel=*/true, gpt_param_count,
                [](const nlohmann::json& j) { return gpt_tp_shard_rule(gpt_config_from_hf(j, "model config").vocab_size); },
                open_hf_gpt2_weights, gpt_flags});
    runtime::register_model(
        "simple-transformer",
        {st_options,
         [](const nlohmann::json& j, int64_t T) {
           return SimpleTransformer::describe(SimpleTransformer::config_from_json(j), T);
         },
         [](const nlohmann::json& j, const runtime::ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
           return std::make_shared<SimpleTransformer>(SimpleTransformer::config_from_json(j), dropout_generator(b),
                                                      b.layers);
         },
         {}, false, st_param_count, {}, {}, st_flags});
    runtime::register_model(
        "mlp", {mlp_options, [](const nlohmann::json& j, int64_t) { return MlpLm::describe(MlpLm::config_from_json(j)); },
                [](const nlohmann::json& j, const runtime::ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
                  return std::make_shared<MlpLm>(MlpLm::config_from_json(j), b.layers);
                },
                {}, false, mlp_param_count, {}, {}, mlp_flags});
  }
};
const Registrar registrar;

}  // namespace
}  // namespace st::models
