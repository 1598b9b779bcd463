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
                }});
    runtime::register_model("simple-transformer",
                            {st_from_config, [](const nlohmann::json& j) -> std::shared_ptr<runtime::LanguageModel> {
                               return std::make_shared<SimpleTransformer>(SimpleTransformer::config_from_json(j),
                                                                          std::make_shared<Generator>(0, 0));
                             }});
    runtime::register_model("mlp", {mlp_from_config, [](const nlohmann::json& j) -> std::shared_ptr<runtime::LanguageModel> {
                                      return std::make_shared<MlpLm>(MlpLm::config_from_json(j));
                                    }});
  }
};
const Registrar registrar;

}  // namespace
}  // namespace st::models
