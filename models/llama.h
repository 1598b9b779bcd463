// Llama (Hugging Face's LlamaForCausalLM) as a decoder description (models/decoder/decoder_spec.h):
// pre-RMSNorm, rotary positions (rotate-half layout, theta and Llama 3's rope scaling),
// grouped-query attention, a SwiGLU MLP, no biases (unless attention_bias / mlp_bias), a tied or
// untied head; HF's names and nn.Linear (out, in) layouts, so checkpoints need no transposes:
//   model.embed_tokens.weight (V, C)
//   model.layers.{i}.input_layernorm.weight (C)          model.layers.{i}.post_attention_layernorm.weight (C)
//   model.layers.{i}.self_attn.q_proj.weight (H·D, C)    k_proj, v_proj (Hkv·D, C)   o_proj (C, H·D)
//   model.layers.{i}.mlp.gate_proj.weight (F, C)         up_proj (F, C)              down_proj (C, F)
//   model.norm.weight (C)                                lm_head.weight (V, C) (untied; tied: embed_tokens)
// Initialisation is HF's _init_weights: normal(0, initializer_range) for every matrix and the
// embedding, RMSNorm weights 1.
//
// config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (default: the heads), head_dim (default C / heads), rms_norm_eps,
// max_position_embeddings, vocab_size, tie_word_embeddings, initializer_range, attention_bias,
// mlp_bias, hidden_act (silu only), pretraining_tp (1 only); rope theta as transformers 4 writes it
// (rope_theta, rope_scaling) or as transformers 5 does (rope_parameters: {rope_type, rope_theta,
// ...}); rope_type "default" or "llama3" (factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings); any other rope type is a ValueError naming it.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/decoder/decoder.h"
#include "runtime/parallel/state_io.h"

namespace st::models {

// The sizes a run gives on the command line (what `--model llama` builds without --init-from).
struct LlamaSizes {
  int64_t layers = 2, d_model = 64, heads = 4, kv_heads = 0, ffn = 0, vocab = 256, context = 64;
  double rope_theta = 10000.0, rms_norm_eps = 1e-5;
  bool tied = false;
};
// ffn 0: Meta's rule, 2/3 · 4C rounded up to a multiple of 256; kv_heads 0: the heads.
nlohmann::json llama_hf_config(const LlamaSizes& s);
// The description of a Llama config.json (validated: `where` names the file in errors).
DecoderSpec llama_spec(const nlohmann::json& config, const std::string& where);

// A save_pretrained directory's weights opened for reading in parts (names, shapes and unknown
// tensors checked; lm_head.weight of a tied model checked equal to the embedding; legacy
// rotary_emb.inv_freq buffers ignored) — what --init-from and a ZeRO-3 rank read from.
runtime::PretrainedSource open_hf_llama_weights(const runtime::LanguageModel& model, const std::string& dir);
void load_hf_llama_weights(runtime::LanguageModel& model, const std::string& dir);

}  // namespace st::models
