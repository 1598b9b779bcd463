// Llama: its description from Hugging Face's config.json, the config of a flag-built model, and
// its save_pretrained weights (see the header).
#include "models/llama.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "models/hf_config_fields.h"
#include "runtime/io/safetensors_index.h"
#include "tensor/error.h"

namespace st::models {
namespace {

// The rope settings in either spelling: transformers 5's rope_parameters {rope_type, rope_theta,
// ...}, or transformers 4's rope_theta + rope_scaling {rope_type (or type), ...}.
RopeSpec rope_of(const nlohmann::json& j, const std::string& where) {
  RopeSpec r;
  nlohmann::json scaling;
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    const nlohmann::json& p = j.at("rope_parameters");
    r.theta = get_or<double>(p, "rope_theta", get_or<double>(j, "rope_theta", 10000.0, where), where);
    scaling = p;
  } else {
    r.theta = get_or<double>(j, "rope_theta", 10000.0, where);
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) scaling = j.at("rope_scaling");
  }
  const char* field = j.contains("rope_parameters") && j.at("rope_parameters").is_object() ? "rope_parameters" : "rope_scaling";
  if (scaling.is_object()) {
    const bool typed = (scaling.contains("rope_type") && !scaling.at("rope_type").is_null()) ||
                       (scaling.contains("type") && !scaling.at("type").is_null());
    // a scaling without its type ({"factor": 8.0}) is refused, as transformers refuses it: read
    // as "default" it would train unscaled without a word
    for (const auto& [key, value] : scaling.items()) {
      if (key == "rope_type" || key == "type" || key == "rope_theta") continue;
      ST_CHECK(typed, ValueError,
               where << ": \"" << field << "\" has \"" << key << "\" but no \"rope_type\" (or \"type\"): say which "
                     << "scaling it is (only \"default\" and \"llama3\" are supported)");
    }
    r.type = get_or<std::string>(scaling, "rope_type", get_or<std::string>(scaling, "type", "default", where), where);
    ST_CHECK(r.type == "default" || r.type == "llama3", ValueError,
             where << ": rope type \"" << r.type << "\" is not supported (only \"default\" and \"llama3\")");
    if (r.type == "default" && scaling.contains("factor") && !scaling.at("factor").is_null())
      ST_CHECK(get_or<double>(scaling, "factor", 1.0, where) == 1.0, ValueError,
               where << ": \"" << field << "\" has rope type \"default\" with \"factor\" "
                     << scaling.at("factor").dump() << ": the default rope has no scaling factor");
    if (r.type == "llama3") {
      r.factor = get_or<double>(scaling, "factor", r.factor, where);
      r.low_freq_factor = get_or<double>(scaling, "low_freq_factor", r.low_freq_factor, where);
      r.high_freq_factor = get_or<double>(scaling, "high_freq_factor", r.high_freq_factor, where);
      r.original_max_position =
          get_or<int64_t>(scaling, "original_max_position_embeddings", r.original_max_position, where);
      ST_CHECK(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
                   r.original_max_position > 0,
               ValueError, where << ": llama3 rope scaling needs factor > 0, high_freq_factor > low_freq_factor > 0");
    }
  } else if (!scaling.is_null()) {
    ST_THROW(ValueError, where << ": rope scaling must be an object, got " << scaling.dump());
  }
  ST_CHECK(r.theta > 0, ValueError, where << ": rope theta must be positive, got " << r.theta);
  return r;
}

}  // namespace

nlohmann::json llama_hf_config(const LlamaSizes& s) {
  const int64_t kv = s.kv_heads > 0 ? s.kv_heads : s.heads;
  const int64_t ffn = s.ffn > 0 ? s.ffn : (8 * s.d_model / 3 + 255) / 256 * 256;
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", s.vocab - 1},
          {"eos_token_id", s.vocab - 1},
          {"head_dim", s.d_model / s.heads},
          {"hidden_act", "silu"},
          {"hidden_size", s.d_model},
          {"initializer_range", 0.02},
          {"intermediate_size", ffn},
          {"max_position_embeddings", s.context},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", s.heads},
          {"num_hidden_layers", s.layers},
          {"num_key_value_heads", kv},
          {"pretraining_tp", 1},
          {"rms_norm_eps", s.rms_norm_eps},
          {"rope_scaling", nullptr},
          {"rope_theta", s.rope_theta},
          {"tie_word_embeddings", s.tied},
          {"torch_dtype", "float32"},
          {"use_cache", true},
          {"vocab_size", s.vocab}};
}

DecoderSpec llama_spec(const nlohmann::json& j, const std::string& where) {
  ST_CHECK(j.is_object(), ValueError, where << ": not a JSON object");
  const std::string type = get_or<std::string>(j, "model_type", "", where);
  ST_CHECK(type == "llama", ValueError, where << ": model_type \"" << type << "\" is not \"llama\"");
  DecoderSpec s;
  s.family = "llama";
  s.layers = required_int(j, "num_hidden_layers", where);
  s.d_model = required_int(j, "hidden_size", where);
  s.heads = required_int(j, "num_attention_heads", where);
  s.kv_heads = get_or<int64_t>(j, "num_key_value_heads", s.heads, where);
  ST_CHECK(s.heads > 0 && s.d_model > 0, ValueError, where << ": hidden_size and num_attention_heads must be positive");
  s.head_dim = get_or<int64_t>(j, "head_dim", s.d_model / s.heads, where);
  s.ffn = required_int(j, "intermediate_size", where);
  s.vocab = required_int(j, "vocab_size", where);
  s.context = get_or<int64_t>(j, "max_position_embeddings", 2048, where);
  s.norm = NormKind::rmsnorm;
  s.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, where);
  s.position = PositionKind::rotary;
  s.rope = rope_of(j, where);
  s.mlp = MlpKind::swiglu;
  s.qkv_bias = s.o_bias = get_or<bool>(j, "attention_bias", false, where);
  s.mlp_bias = get_or<bool>(j, "mlp_bias", false, where);
  s.tied_head = get_or<bool>(j, "tie_word_embeddings", false, where);
  // LlamaModel: nn.Embedding(vocab_size, hidden_size, padding_idx=config.pad_token_id)
  s.padding_idx = get_or<int64_t>(j, "pad_token_id", -1, where);
  ST_CHECK(s.padding_idx >= -1 && s.padding_idx < s.vocab, ValueError,
           where << ": \"pad_token_id\" " << s.padding_idx << " is outside the vocabulary of " << s.vocab);
  s.layout = WeightLayout::out_in;
  s.init_std = get_or<double>(j, "initializer_range", 0.02, where);
  s.scaled_residual_init = false;
  const std::string act = get_or<std::string>(j, "hidden_act", "silu", where);
  ST_CHECK(act == "silu", ValueError, where << ": hidden_act \"" << act << "\" is not supported (only \"silu\")");
  const int64_t ptp = get_or<int64_t>(j, "pretraining_tp", 1, where);
  ST_CHECK(ptp == 1, ValueError, where << ": pretraining_tp " << ptp << " is not supported (only 1)");
  const double adrop = get_or<double>(j, "attention_dropout", 0.0, where);
  ST_CHECK(adrop == 0.0, ValueError, where << ": attention_dropout " << adrop << " is not supported (only 0)");
  DecoderNames& n = s.names;
  n.embed_scope = "model";
  n.tok_embed = "embed_tokens";
  n.block_prefix = "model.layers.";
  n.norm1 = "input_layernorm";
  n.norm2 = "post_attention_layernorm";
  n.q = "self_attn.q_proj";
  n.k = "self_attn.k_proj";
  n.v = "self_attn.v_proj";
  n.o = "self_attn.o_proj";
  n.gate = "mlp.gate_proj";
  n.up = "mlp.up_proj";
  n.down = "mlp.down_proj";
  n.head_scope = "";
  n.final_norm = "model.norm";
  n.lm_head = "lm_head";
  s.hf_config = j;
  s.check();
  return s;
}

runtime::PretrainedSource open_hf_llama_weights(const runtime::LanguageModel& model, const std::string& dir) {
  ST_CHECK(std::filesystem::is_directory(dir), IOError, "--init-from " << dir << ": not a directory");
  runtime::PretrainedSource out;
  out.store = std::make_shared<const runtime::SafetensorsStore>(dir, "model");
  const runtime::SafetensorsStore& store = *out.store;
  runtime::PartSource& src = out.parts = runtime::model_part_source(model, store);
  runtime::check_parts(src, model.named_parameters(), /*strict=*/false);  // headers only: missing keys, shapes first
  const bool tied = model.config_json().value("tie_word_embeddings", false);
  if (model.holds_all()) {
    std::set<std::string> taken;
    for (auto& [n, p] : model.named_parameters()) taken.insert(src.in_store(n));
    for (const std::string& n : store.names()) {
      const std::string inv_freq = "rotary_emb.inv_freq";  // a buffer older transformers saved
      const bool legacy = n.size() >= inv_freq.size() && n.compare(n.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
      ST_CHECK(taken.count(n) || legacy || (tied && n == "lm_head.weight"), ValueError,
               store.where() << ": unexpected key '" << n << "'");
    }
  }
  if (tied && store.contains("lm_head.weight"))
    out.same_as = {{"model.embed_tokens.weight", "lm_head.weight"}};  // a tied head written out: the same values
  return out;
}

void load_hf_llama_weights(runtime::LanguageModel& model, const std::string& dir) {
  runtime::load_pretrained_parts(open_hf_llama_weights(model, dir), model.named_parameters());
}

}  // namespace st::models
