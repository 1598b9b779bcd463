// Hugging Face GPT-2 import/export (see the header).
#include "models/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>

#include "models/hf_config_fields.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/parallel/state_io.h"
#include "tensor/autograd.h"

namespace st::models {
namespace {

}  // namespace

GptConfig gpt_config_from_hf(const nlohmann::json& j, const std::string& where) {
  ST_CHECK(j.is_object(), ValueError, where << ": not a JSON object");
  std::string type = get_or<std::string>(j, "model_type", "", where);
  ST_CHECK(type == "gpt2", ValueError, where << ": model_type \"" << type << "\" is not supported (only \"gpt2\")");
  GptConfig c;
  c.n_layer = required_int(j, "n_layer", where);
  c.n_embd = required_int(j, "n_embd", where);
  c.n_head = required_int(j, "n_head", where);
  c.vocab_size = required_int(j, "vocab_size", where);
  c.n_positions = required_int(j, "n_positions", where);
  c.layer_norm_epsilon = get_or<double>(j, "layer_norm_epsilon", 1e-5, where);
  c.embd_pdrop = get_or<double>(j, "embd_pdrop", 0.1, where);
  c.resid_pdrop = get_or<double>(j, "resid_pdrop", 0.1, where);
  if (const double attn_pdrop = get_or<double>(j, "attn_pdrop", 0.1, where); attn_pdrop > 0)
    std::cerr << "warning: " << where << ": attn_pdrop " << attn_pdrop
              << " is not applied (shardtrain does not drop attention probabilities; embd_pdrop and resid_pdrop "
                 "are applied)\n";
  std::string act = get_or<std::string>(j, "activation_function", "gelu_new", where);
  ST_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", ValueError,
           where << ": activation_function \"" << act << "\" is not supported (only the tanh GELU: gelu_new)");
  int64_t n_inner = get_or<int64_t>(j, "n_inner", 4 * c.n_embd, where);
  ST_CHECK(n_inner == 4 * c.n_embd, ValueError,
           where << ": n_inner " << n_inner << " is not supported (only 4·n_embd = " << 4 * c.n_embd << ")");
  ST_CHECK(get_or<bool>(j, "scale_attn_weights", true, where), ValueError,
           where << ": scale_attn_weights false is not supported");
  ST_CHECK(!get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false, where), ValueError,
           where << ": scale_attn_by_inverse_layer_idx true is not supported");
  ST_CHECK(!get_or<bool>(j, "reorder_and_upcast_attn", false, where), ValueError,
           where << ": reorder_and_upcast_attn true is not supported");
  ST_CHECK(!get_or<bool>(j, "add_cross_attention", false, where), ValueError,
           where << ": add_cross_attention true is not supported");
  ST_CHECK(get_or<bool>(j, "tie_word_embeddings", true, where), ValueError,
           where << ": tie_word_embeddings false is not supported (lm_head is wte)");
  ST_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.vocab_size > 0 && c.n_positions > 0, ValueError,
           where << ": sizes must be positive");
  ST_CHECK(c.n_embd % c.n_head == 0, ValueError,
           where << ": n_embd " << c.n_embd << " is not divisible by n_head " << c.n_head);
  return c;
}

namespace {
bool is_legacy_buffer(const std::string& n) {
  auto ends_with = [&](const std::string& suf) {
    return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}
}  // namespace

runtime::PretrainedSource open_hf_gpt2_weights(const runtime::LanguageModel& model, const std::string& dir) {
  ST_CHECK(std::filesystem::is_directory(dir), IOError, "--init-from " << dir << ": not a directory");
  runtime::PretrainedSource out;
  out.store = std::make_shared<const runtime::SafetensorsStore>(dir, "model");
  const runtime::SafetensorsStore& store = *out.store;
  runtime::PartSource& src = out.parts = runtime::model_part_source(model, store);
  const std::string prefix = "transformer.";
  src.file_name = [&store, prefix](const std::string& n) {  // GPT2LMHeadModel's names, or GPT2Model's bare ones
    if (store.contains(n) || n.rfind(prefix, 0) != 0) return n;
    const std::string bare = n.substr(prefix.size());
    return store.contains(bare) ? bare : n;
  };
  runtime::check_parts(src, model.named_parameters(), /*strict=*/false);  // headers only: missing keys, shapes first
  if (model.holds_all()) {
    std::set<std::string> taken;
    for (auto& [n, p] : model.named_parameters()) taken.insert(src.in_store(n));
    for (const std::string& n : store.names())
      ST_CHECK(taken.count(n) || is_legacy_buffer(n) || n == "lm_head.weight", ValueError,
               store.where() << ": unexpected key '" << n << "'");
  }
  out.same_as = {{"transformer.wte.weight", "lm_head.weight"}};  // lm_head read as this rank's part of wte
  return out;
}

void load_hf_gpt2_weights(runtime::LanguageModel& model, const std::string& dir) {
  runtime::load_pretrained_parts(open_hf_gpt2_weights(model, dir), model.named_parameters());
}

std::shared_ptr<Gpt> load_hf_gpt2(const std::string& dir, std::shared_ptr<Generator> gen, double dropout) {
  const std::string cfg_path = dir + "/config.json";
  ST_CHECK(std::filesystem::is_directory(dir), IOError, "--init-from " << dir << ": not a directory");
  GptConfig c = gpt_config_from_hf(runtime::read_json_file(cfg_path), cfg_path);
  if (dropout >= 0) c.embd_pdrop = c.resid_pdrop = dropout;
  auto model = std::make_shared<Gpt>(c, std::move(gen));
  load_hf_gpt2_weights(*model, dir);
  return model;
}

void save_hf_gpt2(const Gpt& model, const std::string& dir) {
  std::filesystem::create_directories(dir);
  runtime::NamedTensors sd;
  {
    NoGradGuard ng;
    for (auto& [n, p] : model.state_dict()) sd.emplace_back(n, p.to(DType::f32).contiguous());
  }
  std::sort(sd.begin(), sd.end(), [](auto& a, auto& b) { return a.first < b.first; });
  runtime::save_safetensors(dir + "/model.safetensors", sd, {{"format", "pt"}});
  runtime::write_json_file(dir + "/config.json", model.config_json());
}

}  // namespace st::models
