// GPT-2 as a decoder description (models/decoder/decoder_spec.h): pre-LayerNorm, learned
// positions, tanh-GELU MLP of width 4C, multi-head attention with biases, tied embeddings, with
// Hugging Face's parameter names and Conv1D (in, out) layouts so HF weights load without
// transposes:
//   transformer.wte.weight (V, C)            transformer.wpe.weight (n_positions, C)
//   transformer.h.{i}.ln_1.{weight,bias} (C) transformer.h.{i}.attn.c_attn.weight (C, 3C) bias (3C)
//   transformer.h.{i}.attn.c_proj (C, C)     transformer.h.{i}.ln_2.{weight,bias} (C)
//   transformer.h.{i}.mlp.c_fc (C, 4C)       transformer.h.{i}.mlp.c_proj (4C, C)
//   transformer.ln_f.{weight,bias} (C)       lm_head = wteᵀ (tied, not a separate tensor)
// Initialisation is HF's: normal(0, 0.02) for wte, wpe and every Conv1D weight, std 0.02/√(2L)
// for the residual projections (attn.c_proj, mlp.c_proj), biases 0, LayerNorm 1/0. The model is
// a DecoderModel (one class for one process and tensor parallelism); Gpt only builds it from
// GPT-2's sizes.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "models/decoder/decoder.h"

namespace st::models {

struct GptConfig {
  int64_t n_layer = 2, n_embd = 64, n_head = 4, vocab_size = 256, n_positions = 64;
  double layer_norm_epsilon = 1e-5;
  double embd_pdrop = 0.0, resid_pdrop = 0.0;  // attention-probability dropout is not implemented
};

// ValueError unless every size is positive and d_model divides by heads.
void check_gpt_config(const GptConfig& c);
// The Hugging Face config.json of a GPT of these sizes.
nlohmann::json gpt_hf_config_json(const GptConfig& c);
// GPT-2's description: sizes, names, layout, init (its hf_config is gpt_hf_config_json(c)).
DecoderSpec gpt_spec(const GptConfig& c);
// Every layer's names, full shapes and forward FLOPs at sequence length T.
runtime::ModelDescription describe_gpt(const GptConfig& c, int64_t seq_len);
// Forward FLOPs per token of one block: the four matmuls (attention width A, MLP width F) and
// the attention scores over T positions (causal half not discounted).
double gpt_block_flops(double C, double A, double F, double T);
// The tensor-parallel plan of a GPT-2 of vocabulary V (models/decoder/decoder_tp_plan.h).
runtime::ShardRule gpt_tp_shard_rule(int64_t vocab_size);
// The bos/eos id config.json names: GPT-2's <|endoftext|> (50256) for a vocabulary that holds
// GPT-2's BPE ids (50257, or padded: 50304), else the vocabulary's last id.
int64_t gpt_end_of_text(int64_t vocab_size);

class Gpt : public DecoderModel {
 public:
  // Parameters are zeros / LN ones; call init_weights() or load a state dict. `tp`: a group of
  // several ranks splits it (decoder_tp_plan.h); `layers`: a range of its layers (a stage);
  // `form`: the form its layers take (DecoderModel's constructor says which).
  Gpt(const GptConfig& c, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> layers = {},
      runtime::TpGroup tp = nullptr, const runtime::ModelForm& form = {});
  const GptConfig& config() const { return cfg_; }

 private:
  GptConfig cfg_;
};

}  // namespace st::models
