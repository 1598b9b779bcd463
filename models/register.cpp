// Registers the model families with runtime/train/model_registry.h. st_models is an OBJECT library,
// so this file's static registrar is part of every program that links st_models.
#include <memory>

#include "models/gpt.h"
#include "models/gpt_tp.h"
#include "models/hf_gpt2.h"
#include "models/mlp_lm.h"
#include "models/simple_transformer.h"
#include "runtime/common/json_io.h"
#include "runtime/train/model_registry.h"
#include "runtime/io/safetensors.h"

namespace st::models {
namespace {

int64_t seq_or(const runtime::TrainConfig& cfg, int64_t dflt) { return cfg.seq_len > 0 ? cfg.seq_len : dflt; }

// The dropout stream: its own seed (derived from the run's), so masks are not the numbers that
// initialised the weights; the trainer checkpoints its (seed, offset).
std::shared_ptr<Generator> dropout_generator(const Generator& init) {
  return std::make_shared<Generator>(init.seed() ^ 0x9E3779B97F4A7C15ull, 0);
}

std::shared_ptr<runtime::LanguageModel> gpt_from_config(const runtime::TrainConfig& cfg, Generator& gen) {
  auto dropout_gen = dropout_generator(gen);
  if (!cfg.init_from.empty()) return load_hf_gpt2(cfg.init_from, dropout_gen, cfg.dropout);
  GptConfig c;
  c.n_layer = cfg.layers;
  c.n_embd = cfg.d_model;
  c.n_head = cfg.heads;
  c.vocab_size = cfg.vocab;
  c.n_positions = seq_or(cfg, 64);
  if (cfg.dropout >= 0) c.embd_pdrop = c.resid_pdrop = cfg.dropout;
  auto m = std::make_shared<Gpt>(c, dropout_gen);
  m->init_weights(gen);
  return m;
}

// The GPT split over a tp group: the same numbers as gpt_from_config, sharded.
std::shared_ptr<runtime::LanguageModel> gpt_tp_from_config(const runtime::TrainConfig& cfg, Generator& gen,
                                                           std::shared_ptr<comm::Communicator> tp) {
  auto dropout_gen = dropout_generator(gen);
  GptConfig c;
  std::map<std::string, Tensor> hf;
  if (!cfg.init_from.empty()) {
    c = gpt_config_from_hf(runtime::read_json_file(cfg.init_from + "/config.json"), cfg.init_from + "/config.json");
    hf = hf_state_to_gpt(runtime::load_safetensors(cfg.init_from + "/model.safetensors"), cfg.init_from);
  } else {
    c.n_layer = cfg.layers;
    c.n_embd = cfg.d_model;
    c.n_head = cfg.heads;
    c.vocab_size = cfg.vocab;
    c.n_positions = seq_or(cfg, 64);
  }
  if (cfg.dropout >= 0) c.embd_pdrop = c.resid_pdrop = cfg.dropout;
  auto m = std::make_shared<TpGpt>(c, tp, dropout_gen);
  if (hf.empty())
    m->init_weights(gen);
  else
    m->load_full_state_dict(hf);
  return m;
}

std::shared_ptr<runtime::LanguageModel> st_from_config(const runtime::TrainConfig& cfg, Generator& gen) {
  SimpleTransformerConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.heads = cfg.heads;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  if (cfg.dropout >= 0) c.dropout = cfg.dropout;
  auto m = std::make_shared<SimpleTransformer>(c, dropout_generator(gen));
  m->init_weights(gen);
  return m;
}

std::shared_ptr<runtime::LanguageModel> mlp_from_config(const runtime::TrainConfig& cfg, Generator& gen) {
  MlpConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  auto m = std::make_shared<MlpLm>(c);
  m->init_weights(gen);
  return m;
}

// Closed forms of each family's parameter count (tests/runtime/train/test_memory_check.cpp checks them
// against the built models). GPT: wte V·C + wpe T·C; per block ln_1, ln_2 2·2C, c_attn 3C² + 3C,
// attn c_proj C² + C, c_fc 4C² + 4C, mlp c_proj 4C² + C; ln_f 2C; the head is wte (tied).
double gpt_param_count(const runtime::TrainConfig& cfg) {
  GptConfig c;
  if (!cfg.init_from.empty()) {
    c = gpt_config_from_hf(runtime::read_json_file(cfg.init_from + "/config.json"), cfg.init_from + "/config.json");
  } else {
    c.n_layer = cfg.layers;
    c.n_embd = cfg.d_model;
    c.vocab_size = cfg.vocab;
    c.n_positions = seq_or(cfg, 64);
  }
  const double L = static_cast<double>(c.n_layer), C = static_cast<double>(c.n_embd);
  const double V = static_cast<double>(c.vocab_size), T = static_cast<double>(c.n_positions);
  return 12 * L * C * C + 13 * L * C + C * (V + T) + 2 * C;
}
// Embedding V·C; per layer in_proj 3C² + 3C, out_proj C² + C, linear1 C·F + F, linear2 F·C + C,
// norm1, norm2 2·2C; head C·V + V.
double st_param_count(const runtime::TrainConfig& cfg) {
  const double L = static_cast<double>(cfg.layers), C = static_cast<double>(cfg.d_model);
  const double V = static_cast<double>(cfg.vocab), F = static_cast<double>(SimpleTransformerConfig{}.ffn);
  return V * C + L * (4 * C * C + 2 * C * F + F + 9 * C) + C * V + V;
}
// Embedding V·C; per hidden layer C² + C; head C·V + V.
double mlp_param_count(const runtime::TrainConfig& cfg) {
  const double L = static_cast<double>(cfg.layers), C = static_cast<double>(cfg.d_model);
  const double V = static_cast<double>(cfg.vocab);
  return V * C + L * (C * C + C) + C * V + V;
}

struct Registrar {
  Registrar() {
    runtime::register_model(
        "gpt", {gpt_from_config,
                [](const nlohmann::json& j) -> std::shared_ptr<runtime::LanguageModel> {
                  return std::make_shared<Gpt>(gpt_config_from_hf(j, "model config"), std::make_shared<Generator>(0, 0));
                },
                gpt_tp_from_config,
                [](const nlohmann::json& j, std::shared_ptr<comm::Communicator> tp) -> std::shared_ptr<runtime::LanguageModel> {
                  return std::make_shared<TpGpt>(gpt_config_from_hf(j, "model config"), tp,
                                                 std::make_shared<Generator>(0, 0));
                },
                gpt_param_count});
    runtime::register_model("simple-transformer",
                            {st_from_config, [](const nlohmann::json& j) -> std::shared_ptr<runtime::LanguageModel> {
                               return std::make_shared<SimpleTransformer>(SimpleTransformer::config_from_json(j),
                                                                          std::make_shared<Generator>(0, 0));
                             },
                             {}, {}, st_param_count});
    runtime::register_model("mlp", {mlp_from_config, [](const nlohmann::json& j) -> std::shared_ptr<runtime::LanguageModel> {
                                      return std::make_shared<MlpLm>(MlpLm::config_from_json(j));
                                    },
                                    {}, {}, mlp_param_count});
  }
};
const Registrar registrar;

}  // namespace
}  // namespace st::models
