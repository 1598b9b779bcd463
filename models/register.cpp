// Registers the model families with runtime/setup/model_registry.h — the one place that names
// them. st_models is an OBJECT library, so this file's static registrar is part of every program
// that links st_models. The decoder families (GPT-2, Llama) are descriptions of one model
// (models/decoder/); the seed's encoder Transformer and the MLP are models of their own.
#include <memory>

#include "models/decoder/decoder_tp_plan.h"
#include "models/gpt.h"
#include "models/hf_gpt2.h"
#include "models/llama.h"
#include "models/mlp_lm.h"
#include "models/simple_transformer.h"
#include "runtime/common/json_io.h"
#include "runtime/setup/model_registry.h"

namespace st::models {
namespace {

using runtime::ModelBuild;
using runtime::ModelFactory;
using runtime::ModelOptions;
using runtime::OptionFail;
using runtime::TrainConfig;

int64_t seq_or(const TrainConfig& cfg, int64_t dflt) { return cfg.seq_len > 0 ? cfg.seq_len : dflt; }

std::shared_ptr<Generator> dropout_generator(const ModelBuild& b) {
  return std::make_shared<Generator>(b.dropout_seed, 0);
}

runtime::TpGroup split_group(const ModelBuild& b) { return b.tp && b.tp->size() > 1 ? b.tp : nullptr; }

nlohmann::json read_hf_config(const TrainConfig& cfg) {
  return runtime::read_json_file(cfg.init_from + "/config.json");
}

// The decoder families' checks of the options a run gives (the sizes come from them without
// --init-from): the heads divide the width and, under tp, split over the ranks.
void check_heads(const TrainConfig& c, const OptionFail& fail, int64_t kv_heads) {
  if (c.d_model % c.heads != 0)
    fail("heads", "d-model " + std::to_string(c.d_model) + " is not divisible by heads " + std::to_string(c.heads));
  if (c.tp > 1 && c.heads % c.tp != 0) {
    std::string valid;  // each tp rank holds whole heads
    for (int64_t t = 1; t <= c.heads; ++t)
      if (c.heads % t == 0) valid += (valid.empty() ? "" : ", ") + std::to_string(t);
    fail("tp", "heads " + std::to_string(c.heads) + " is not divisible by tp " + std::to_string(c.tp) + " (--tp can be " +
                   valid + " for " + std::to_string(c.heads) + " heads)");
  }
  if (c.tp > 1 && kv_heads % c.tp != 0)
    fail("tp", "key/value heads " + std::to_string(kv_heads) + " are not divisible by tp " + std::to_string(c.tp) +
                   " (each rank holds whole key/value heads)");
}

// The flags only llama reads (kv-heads, ffn, rope-theta, tie-embeddings) given to a family that
// would ignore them are refused naming the flag and the family (issue 55: --kv-heads 2 on a gpt
// model trained a multi-head model without a word). A value the family has anyway passes: gpt's
// own (as many key/value heads as heads, an MLP of 4·d-model, tied; --init-from of a GPT-2 fills
// these in), and every default.
void check_llama_only(const TrainConfig& c, const OptionFail& fail, const std::string& family, bool gpt) {
  const ModelOptions defaults;
  auto ignored = [&](const char* flag, const std::string& value) {
    fail(flag, "the " + family + " model has no such setting (it is llama's): " + value + " would be ignored");
  };
  if (c.kv_heads != defaults.kv_heads && !(gpt && c.kv_heads == c.heads))
    ignored("kv-heads", std::to_string(c.kv_heads) + " key/value heads");
  if (c.ffn != defaults.ffn && !(gpt && c.ffn == 4 * c.d_model)) ignored("ffn", "an MLP width of " + std::to_string(c.ffn));
  if (c.rope_theta != defaults.rope_theta) ignored("rope-theta", "a rotary base of " + runtime::option_str(c.rope_theta));
  if (c.tie_embeddings != defaults.tie_embeddings && !(gpt && c.tie_embeddings == 1))
    ignored("tie-embeddings", "tie-embeddings " + std::to_string(c.tie_embeddings));
}

// ---- gpt (Hugging Face GPT-2) -----------------------------------------------------------------

GptConfig gpt_config(const nlohmann::json& j) { return gpt_config_from_hf(j, "model config"); }

nlohmann::json gpt_options(const TrainConfig& cfg) {
  GptConfig c;
  if (!cfg.init_from.empty()) {
    c = gpt_config_from_hf(read_hf_config(cfg), cfg.init_from + "/config.json");
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

runtime::ModelOptions gpt_sizes(const nlohmann::json& j) {
  const GptConfig c = gpt_config(j);
  runtime::ModelOptions m;
  m.layers = c.n_layer, m.d_model = c.n_embd, m.heads = c.n_head, m.vocab = c.vocab_size, m.seq_len = c.n_positions;
  m.kv_heads = c.n_head, m.ffn = 4 * c.n_embd, m.tie_embeddings = 1;  // GPT-2: multi-head, 4C, tied
  return m;
}

// ---- llama (Hugging Face LlamaForCausalLM) ----------------------------------------------------

nlohmann::json llama_options(const TrainConfig& cfg) {
  if (!cfg.init_from.empty()) return read_hf_config(cfg);
  LlamaSizes s;
  s.layers = cfg.layers;
  s.d_model = cfg.d_model;
  s.heads = cfg.heads;
  s.kv_heads = cfg.kv_heads;
  s.ffn = cfg.ffn;
  s.vocab = cfg.vocab;
  s.context = seq_or(cfg, 64);
  s.rope_theta = cfg.rope_theta;
  s.tied = cfg.tie_embeddings == 1;
  return llama_hf_config(s);
}

runtime::ModelOptions llama_sizes(const nlohmann::json& j) {
  const DecoderSpec s = llama_spec(j, "model config");
  runtime::ModelOptions m;
  m.layers = s.layers, m.d_model = s.d_model, m.heads = s.heads, m.vocab = s.vocab, m.seq_len = s.context;
  m.kv_heads = s.kv_heads, m.ffn = s.ffn, m.rope_theta = s.rope.theta, m.tie_embeddings = s.tied_head ? 1 : 0;
  return m;
}

// ---- simple-transformer, mlp ------------------------------------------------------------------

nlohmann::json st_options(const TrainConfig& cfg) {
  SimpleTransformerConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.heads = cfg.heads;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  if (cfg.dropout >= 0) c.dropout = cfg.dropout;
  return SimpleTransformer::config_to_json(c);
}

nlohmann::json mlp_options(const TrainConfig& cfg) {
  MlpConfig c;
  c.layers = cfg.layers;
  c.d_model = cfg.d_model;
  c.vocab = cfg.vocab;
  c.max_len = seq_or(cfg, 64);
  return MlpLm::config_to_json(c);
}

// Closed forms of the two own families' parameter counts, for the memory check before a byte is
// allocated (runtime/plan/memory_check.h; tests/runtime/plan/test_memory_check.cpp checks them
// against the built models). The decoders count from their description (decoder_param_count).
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
runtime::ModelOptions llama_flags(const nlohmann::json& j) {
  runtime::ModelOptions m = llama_sizes(j);  // with kv-heads, ffn, rope-theta, tie-embeddings; no dropout
  m.model = "llama";
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
        "gpt",
        {.config_from_options = gpt_options,
         .describe = [](const nlohmann::json& j, int64_t T) { return describe_decoder(gpt_spec(gpt_config(j)), T); },
         .build = [](const nlohmann::json& j, const ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
           return std::make_shared<Gpt>(gpt_config(j), dropout_generator(b), b.layers, split_group(b), b.form);
         },
         .load_pretrained = load_hf_gpt2_weights,
         .tensor_parallel = true,
         .context_parallel = true,
         .sequence_parallel = true,
         .fp8 = true,
         .param_count = [](const nlohmann::json& j) { return decoder_param_count(gpt_spec(gpt_config(j))); },
         .shard_rule = [](const nlohmann::json& j) { return decoder_tp_rule(gpt_spec(gpt_config(j))); },
         .open_pretrained = open_hf_gpt2_weights,
         .hf_model_type = "gpt2",
         .is_default = true,
         .check_options =
             [](const TrainConfig& c, const OptionFail& fail) {
               check_heads(c, fail, c.heads);
               check_llama_only(c, fail, "gpt", /*gpt=*/true);
             },
         .options_of_hf = gpt_sizes,
         .options_of = gpt_flags});
    runtime::register_model(
        "llama",
        {.config_from_options = llama_options,
         .describe = [](const nlohmann::json& j, int64_t T) { return describe_decoder(llama_spec(j, "model config"), T); },
         .build = [](const nlohmann::json& j, const ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
           return std::make_shared<DecoderModel>(llama_spec(j, "model config"), split_group(b), dropout_generator(b),
                                                 b.layers, b.form);
         },
         .load_pretrained = load_hf_llama_weights,
         .tensor_parallel = true,
         .context_parallel = true,
         .sequence_parallel = true,
         .fp8 = true,
         .param_count = [](const nlohmann::json& j) { return decoder_param_count(llama_spec(j, "model config")); },
         .shard_rule = [](const nlohmann::json& j) { return decoder_tp_rule(llama_spec(j, "model config")); },
         .open_pretrained = open_hf_llama_weights,
         .hf_model_type = "llama",
         .check_options =
             [](const TrainConfig& c, const OptionFail& fail) {
               check_heads(c, fail, c.kv_heads > 0 ? c.kv_heads : c.heads);
               if (c.kv_heads > 0 && c.heads % c.kv_heads != 0)
                 fail("kv-heads", std::to_string(c.heads) + " heads do not group evenly over " +
                                      std::to_string(c.kv_heads) + " key/value heads");
               if ((c.d_model / c.heads) % 2 != 0)
                 fail("heads", "rotary positions need an even head dim, d-model / heads = " +
                                   std::to_string(c.d_model / c.heads));
               if (c.dropout > 0) fail("dropout", "the llama model has no dropout layers");
             },
         .options_of_hf = llama_sizes,
         .options_of = llama_flags});
    runtime::register_model(
        "simple-transformer",
        {.config_from_options = st_options,
         .describe =
             [](const nlohmann::json& j, int64_t T) {
               return SimpleTransformer::describe(SimpleTransformer::config_from_json(j), T);
             },
         .build = [](const nlohmann::json& j, const ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
           return std::make_shared<SimpleTransformer>(SimpleTransformer::config_from_json(j), dropout_generator(b),
                                                      b.layers);
         },
         .param_count = st_param_count,
         .check_options =
             [](const TrainConfig& c, const OptionFail& fail) {
               if (c.d_model % c.heads != 0)
                 fail("heads", "d-model " + std::to_string(c.d_model) + " is not divisible by heads " +
                                   std::to_string(c.heads));
               check_llama_only(c, fail, "simple-transformer", false);
             },
         .options_of = st_flags});
    runtime::register_model(
        "mlp",
        {.config_from_options = mlp_options,
         .describe = [](const nlohmann::json& j, int64_t) { return MlpLm::describe(MlpLm::config_from_json(j)); },
         .build = [](const nlohmann::json& j, const ModelBuild& b) -> std::shared_ptr<runtime::LanguageModel> {
           return std::make_shared<MlpLm>(MlpLm::config_from_json(j), b.layers);
         },
         .param_count = mlp_param_count,
         .layer_noun = "hidden layers",
         .check_options =
             [](const TrainConfig& c, const OptionFail& fail) {
               if (c.dropout > 0) fail("dropout", "the mlp model has no dropout layers");
               check_llama_only(c, fail, "mlp", false);
             },
         .options_of = mlp_flags});
  }
};
const Registrar registrar;

}  // namespace
}  // namespace st::models
