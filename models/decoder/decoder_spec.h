// DecoderSpec: a decoder-only transformer described once. Every axis reads this one description —
// the model's layers (models/decoder/decoder.h), its tensor-parallel plan (which parameter is
// column-, row- or vocabulary-parallel, by name: decoder_tp_plan.h), its initialisation, the
// pipeline's and the planner's layer descriptions (names, full shapes, FLOPs:
// describe_decoder), ZeRO-3's units (a layer each), checkpoint names (the family's Hugging Face
// names: DecoderNames) and generation (the KV cache holds kv_heads). A family (GPT-2, Llama) is a
// function from its Hugging Face config.json to a DecoderSpec and back (models/gpt.h,
// models/llama.h); the model registry is the only place that names families.
//
// The block, pre-norm:  x → x + o(attn(norm1(x)))  → h + down(act(up(norm2(h))))
//   norm        LayerNorm (weight, bias) | RMSNorm (weight)
//   position    learned (an embedding added to the tokens') | rotary (q and k rotated in attention)
//   attention   heads query heads, kv_heads key/value heads (kv_heads = heads: multi-head;
//               1: multi-query; else grouped-query), head_dim each; q, k, v packed into one
//               projection [q (heads·D) | k (kv_heads·D) | v (kv_heads·D)] — one parameter
//               (GPT-2's c_attn) or three (Llama's q_proj, k_proj, v_proj, concatenated per step)
//   MLP         GELU (tanh; up (C→F), down (F→C)) | SwiGLU (gate and up (C→F each, one GEMM of
//               their concatenation), silu(gate)·up, down)
//   head        tied (the token embedding's weight) | untied (its own (V, C) weight)
// Weights are stored in the family's layout: in_out (Conv1D: y = x·W, W (in, out), GPT-2) or
// out_in (nn.Linear: y = x·Wᵀ, W (out, in), Llama), so checkpoints need no transposes.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace st::models {

// A parameter's full name under a layer's scope ("" at the top): "transformer.h.3" + "attn.c_attn.weight".
inline std::string join(const std::string& scope, const std::string& name) {
  return scope.empty() ? name : scope + "." + name;
}

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rotary };
enum class MlpKind { gelu, swiglu };
enum class WeightLayout { in_out, out_in };

// Rotary embedding (Hugging Face's LlamaRotaryEmbedding): inv_freq[i] = theta^(−2i/D); type
// "llama3" rescales the low frequencies (factor, low/high_freq_factor, original_max_position).
struct RopeSpec {
  double theta = 10000.0;
  std::string type = "default";  // default | llama3
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

// Where each tensor of the decoder is, as the family's checkpoints name it. Block names are
// relative to block_prefix + index; an empty name: the family has no such tensor.
struct DecoderNames {
  std::string embed_scope;   // the embedding layer's scope: "transformer" | "model"
  std::string tok_embed;     // "wte" | "embed_tokens"
  std::string pos_embed;     // "wpe" | "" (rotary)
  std::string block_prefix;  // "transformer.h." | "model.layers."
  std::string norm1, norm2;  // "ln_1", "ln_2" | "input_layernorm", "post_attention_layernorm"
  std::string qkv;           // packed: "attn.c_attn" | "" (q, k, v below)
  std::string q, k, v;       // "" | "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"
  std::string o;             // "attn.c_proj" | "self_attn.o_proj"
  std::string gate;          // SwiGLU: "mlp.gate_proj"
  std::string up;            // "mlp.c_fc" | "mlp.up_proj"
  std::string down;          // "mlp.c_proj" | "mlp.down_proj"
  std::string head_scope;    // the head layer's scope: "transformer" | ""
  std::string final_norm;    // relative to head_scope: "ln_f" | "model.norm"
  std::string lm_head;       // untied head, relative to head_scope: "lm_head"
};

struct DecoderSpec {
  std::string family;  // the registry's name ("gpt", "llama")
  int64_t layers = 0, d_model = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int64_t context = 0;  // positions the model accepts
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  PositionKind position = PositionKind::learned;
  RopeSpec rope;
  MlpKind mlp = MlpKind::gelu;
  bool qkv_bias = true, o_bias = true, mlp_bias = true;
  bool tied_head = true;
  // Hugging Face's padding_idx of the token embedding (Llama: config.pad_token_id; GPT-2 has
  // none): that row gets no gradient from the lookup, in every layout (models/nn.h Embedding,
  // runtime/parallel/tp_layers.h). -1: none.
  int64_t padding_idx = -1;
  WeightLayout layout = WeightLayout::in_out;
  double embd_pdrop = 0.0, resid_pdrop = 0.0;
  // Initialisation (the family's Hugging Face _init_weights): normal(0, init_std) for every
  // matrix and embedding, biases 0, norms 1 (LayerNorm bias 0); with scaled_residual_init the
  // residual projections (o, down) get init_std / √(2·layers) (GPT-2).
  double init_std = 0.02;
  bool scaled_residual_init = false;
  DecoderNames names;
  // The family's Hugging Face config.json this spec describes (what checkpoints write)
  nlohmann::json hf_config;

  int64_t q_width() const { return heads * head_dim; }              // A
  int64_t kv_width() const { return kv_heads * head_dim; }          // A_kv
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }  // the packed projection's width
  // ValueError naming the field unless every size is positive and the heads fit (heads % kv_heads,
  // rotary: head_dim even).
  void check() const;
  // ValueError naming the fix unless the tensor-parallel plan can split this model over tp ranks
  // (heads, kv_heads and ffn divisible by tp).
  void check_tp(int tp) const;
};

// One parameter of the model: its full name, full shape, and its role in the block (for the
// tensor-parallel plan and the initialisation).
enum class ParamRole {
  tok_embed, pos_embed, norm_weight, norm_bias, qkv_weight, qkv_bias, q_weight, k_weight, v_weight, q_bias,
  k_bias, v_bias, o_weight, o_bias, gate_weight, gate_bias, up_weight, up_bias, down_weight, down_bias,
  lm_head
};
struct ParamInfo {
  std::string name;
  Shape shape;  // full
  ParamRole role;
};

// Layer i of the full model (0 the embedding, 1 … layers the blocks, layers + 1 the head): its
// scope and parameters, tied copies included (the head lists the tied embedding weight).
std::string layer_scope(const DecoderSpec& s, int64_t i);
std::vector<ParamInfo> layer_params(const DecoderSpec& s, int64_t i);
// Forward FLOPs per token of a block at sequence length T, with this rank's share of the heads and
// MLP width (tp): the matrix products and q·kᵀ, p·v (causal half not discounted).
double block_flops(const DecoderSpec& s, double T, int tp = 1);
// The parameter count of the whole model in closed form (tied head counted once).
double decoder_param_count(const DecoderSpec& s);

}  // namespace st::models
