// GPT-2: its description and Hugging Face config (the layers are the decoder's).
#include "models/gpt.h"

#include "models/decoder/decoder_tp_plan.h"

namespace st::models {

void check_gpt_config(const GptConfig& c) {
  ST_CHECK(c.n_layer >= 1 && c.n_embd >= 1 && c.n_head >= 1 && c.vocab_size >= 1 && c.n_positions >= 1, ValueError,
           "GPT: sizes must be positive (layers " << c.n_layer << ", d_model " << c.n_embd << ", heads " << c.n_head
                                                  << ", vocab " << c.vocab_size << ", positions " << c.n_positions << ")");
  ST_CHECK(c.n_embd % c.n_head == 0, ValueError,
           "GPT: d_model " << c.n_embd << " is not divisible by heads " << c.n_head);
}

double gpt_block_flops(double C, double A, double F, double T) {
  const double matmuls = 2.0 * (C * 3 * A + A * C + C * F + F * C);
  return matmuls + 4.0 * T * A;  // + q·kᵀ and p·v
}

DecoderSpec gpt_spec(const GptConfig& c) {
  check_gpt_config(c);
  DecoderSpec s;
  s.family = "gpt";
  s.layers = c.n_layer;
  s.d_model = c.n_embd;
  s.heads = s.kv_heads = c.n_head;
  s.head_dim = c.n_embd / c.n_head;
  s.ffn = 4 * c.n_embd;
  s.vocab = c.vocab_size;
  s.context = c.n_positions;
  s.norm = NormKind::layernorm;
  s.norm_eps = c.layer_norm_epsilon;
  s.position = PositionKind::learned;
  s.mlp = MlpKind::gelu;
  s.qkv_bias = s.o_bias = s.mlp_bias = true;
  s.tied_head = true;
  s.layout = WeightLayout::in_out;
  s.embd_pdrop = c.embd_pdrop;
  s.resid_pdrop = c.resid_pdrop;
  s.init_std = 0.02;
  s.scaled_residual_init = true;
  DecoderNames& n = s.names;
  n.embed_scope = "transformer";
  n.tok_embed = "wte";
  n.pos_embed = "wpe";
  n.block_prefix = "transformer.h.";
  n.norm1 = "ln_1";
  n.norm2 = "ln_2";
  n.qkv = "attn.c_attn";
  n.o = "attn.c_proj";
  n.up = "mlp.c_fc";
  n.down = "mlp.c_proj";
  n.head_scope = "transformer";
  n.final_norm = "ln_f";
  s.hf_config = gpt_hf_config_json(c);
  return s;
}

runtime::ModelDescription describe_gpt(const GptConfig& c, int64_t seq_len) {
  return describe_decoder(gpt_spec(c), seq_len);
}

runtime::ShardRule gpt_tp_shard_rule(int64_t vocab_size) {
  GptConfig c;
  c.n_layer = 1;
  c.vocab_size = vocab_size;
  return decoder_tp_rule(gpt_spec(c));  // block names of any index (the rule reads them as block 0's)
}

Gpt::Gpt(const GptConfig& c, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> layers,
         runtime::TpGroup tp, const runtime::ModelForm& form)
    : DecoderModel(gpt_spec(c), std::move(tp), std::move(gen), std::move(layers), form), cfg_(c) {}


int64_t gpt_end_of_text(int64_t vocab_size) {
  constexpr int64_t kGpt2EndOfText = 50256;  // GPT-2's BPE: <|endoftext|>, its last id (50257 ids)
  return vocab_size > kGpt2EndOfText ? kGpt2EndOfText : vocab_size - 1;
}

nlohmann::json gpt_hf_config_json(const GptConfig& cfg_) {
  const int64_t eos = gpt_end_of_text(cfg_.vocab_size);
  return {{"activation_function", "gelu_new"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"attn_pdrop", 0.0},
          {"bos_token_id", eos},
          {"embd_pdrop", cfg_.embd_pdrop},
          {"eos_token_id", eos},
          {"initializer_range", 0.02},
          {"layer_norm_epsilon", cfg_.layer_norm_epsilon},
          {"model_type", "gpt2"},
          {"n_embd", cfg_.n_embd},
          {"n_head", cfg_.n_head},
          {"n_inner", nullptr},
          {"n_layer", cfg_.n_layer},
          {"n_positions", cfg_.n_positions},
          {"resid_pdrop", cfg_.resid_pdrop},
          {"scale_attn_by_inverse_layer_idx", false},
          {"scale_attn_weights", true},
          {"reorder_and_upcast_attn", false},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"},
          {"vocab_size", cfg_.vocab_size}};
}

}  // namespace st::models
