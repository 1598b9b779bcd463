// GPT-2: layers, initialisation and the Hugging Face config.
#include "models/gpt.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/lm_head_loss.h"
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "tensor/autograd.h"

namespace st::models {
// ---- embedding --------------------------------------------------------------------------------

GptEmbedding::GptEmbedding(const GptConfig& c, std::shared_ptr<Generator> gen)
    : drop_(c.embd_pdrop, std::move(gen), /*site=*/0) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd));
}

Tensor GptEmbedding::forward(const Tensor& ids) {
  ST_CHECK(ids.dim() == 2, ShapeError, "GPT: token ids must be (B, T), got " << shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  ST_CHECK(T <= wpe->weight.size(0), ShapeError,
           "GPT: sequence length " << T << " exceeds the context length " << wpe->weight.size(0));
  Tensor tok = wte->forward(ids);                 // (B, T, C)
  Tensor pos = wpe->weight.narrow(0, 0, T);       // (T, C), broadcast over B
  return drop_.forward(ops::add(tok, pos), is_training());
}

runtime::LayerCost GptEmbedding::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), static_cast<double>(wte->weight.size(1))};  // one add per channel
}

// ---- block ------------------------------------------------------------------------------------

GptBlock::GptBlock(int64_t c, int64_t h, int64_t hd, int64_t f, double ln_eps, double resid_pdrop,
                   std::shared_ptr<Generator> gen, int index)
    : n_embd(c), n_head(h), head_dim(hd), ffn(f), drop_(resid_pdrop, std::move(gen), static_cast<uint64_t>(index)) {
  const int64_t A = h * hd;  // attention width held here (C, or C/tp)
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c, ln_eps));
  c_attn = register_module("attn.c_attn", std::make_shared<Linear>(c, 3 * A));
  attn_proj = register_module("attn.c_proj", std::make_shared<Linear>(A, c));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c, ln_eps));
  c_fc = register_module("mlp.c_fc", std::make_shared<Linear>(c, f));
  mlp_proj = register_module("mlp.c_proj", std::make_shared<Linear>(f, c));
}

Tensor GptBlock::attention(const Tensor& h) const {
  // h (B, T, C) → qkv (B, T, 3A) → heads (B, T, A) → (B, T, C)
  return attn_proj->forward(causal_self_attention(c_attn->forward(h), n_head, head_dim));
}

// h (B, T, C) → gelu(h·W_fc + b_fc)·W_proj + b_proj (B, T, C), one op so CUDA can fuse it
Tensor GptBlock::mlp(const Tensor& h) const {
  return ops::mlp_gelu(h, c_fc->weight, c_fc->bias, mlp_proj->weight, mlp_proj->bias);
}

Tensor GptBlock::forward(const Tensor& x) {
  ST_CHECK(x.dim() == 3 && x.size(2) == n_embd, ShapeError,
           "GPT block: input must be (B, T, " << n_embd << "), got " << shape_str(x.shape()));
  // ln_1 and ln_2 each as one op with the residual stream they read (ops/add_layernorm.h): x's two
  // gradients (the residual's, ln_1's) meet in ln_1's backward, h = x + drop(attn) is formed in
  // ln_2's forward kernel; the block's last add stays (ln_f / the next block's ln_1 is another layer)
  ops::ResidualNorm s1 = ln_1->forward_residual(x);                            // {x, ln_1(x)}
  ops::ResidualNorm s2 = drop_.add_layernorm(s1.r, attention(s1.y), *ln_2, is_training());  // {h, ln_2(h)}
  return ops::add(s2.r, drop_.forward(mlp(s2.y), is_training()));
}

double gpt_block_flops(double C, double A, double F, double T) {
  const double matmuls = 2.0 * (C * 3 * A + A * C + C * F + F * C);
  return matmuls + 4.0 * T * A;  // + q·kᵀ and p·v
}

runtime::LayerCost GptBlock::cost(int64_t seq_len) const {
  return {static_cast<double>(param_bytes()),
          gpt_block_flops(static_cast<double>(n_embd), static_cast<double>(n_head * head_dim),
                          static_cast<double>(ffn), static_cast<double>(seq_len))};
}

// ---- head -------------------------------------------------------------------------------------

GptHead::GptHead(const GptConfig& c, Tensor tied_wte) : wte(std::move(tied_wte)) {
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  register_parameter("wte.weight", wte);  // the same tensor as the embedding's (tied)
}

// h (B, T, C) → ln_f → · wteᵀ (C, V) → (B, T, V)
Tensor GptHead::logits(const Tensor& h) const { return ops::matmul(ln_f->forward(h), wte, false, true); }

// chunked: h (B, T, C) → ln_f → (B, T, C), the projection left to Gpt::loss
Tensor GptHead::forward(const Tensor& h) { return chunked ? ln_f->forward(h) : logits(h); }

runtime::LayerCost GptHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(wte.size(0) * wte.size(1))};
}

// ---- model ------------------------------------------------------------------------------------

void check_gpt_config(const GptConfig& c) {
  ST_CHECK(c.n_layer >= 1 && c.n_embd >= 1 && c.n_head >= 1 && c.vocab_size >= 1 && c.n_positions >= 1, ValueError,
           "GPT: sizes must be positive (layers " << c.n_layer << ", d_model " << c.n_embd << ", heads " << c.n_head
                                                  << ", vocab " << c.vocab_size << ", positions " << c.n_positions << ")");
  ST_CHECK(c.n_embd % c.n_head == 0, ValueError,
           "GPT: d_model " << c.n_embd << " is not divisible by heads " << c.n_head);
}

Gpt::Gpt(const GptConfig& c, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> ranges) : cfg_(c) {
  check_gpt_config(c);
  set_generator(gen);
  std::shared_ptr<GptEmbedding> emb;
  for (int i : set_layer_ranges(std::move(ranges), static_cast<int>(c.n_layer) + 2)) {
    if (i == 0) {
      emb = std::make_shared<GptEmbedding>(c, gen);
      add_layer("transformer", emb);
    } else if (i <= c.n_layer) {
      add_layer("transformer.h." + std::to_string(i - 1),
                std::make_shared<GptBlock>(c.n_embd, c.n_head, c.n_embd / c.n_head, 4 * c.n_embd,
                                           c.layer_norm_epsilon, c.resid_pdrop, gen, i));
    } else {  // the head: the embedding's wte, or this stage's own copy of it
      Tensor wte = emb ? emb->wte->weight : Tensor::zeros({c.vocab_size, c.n_embd});
      head_ = std::make_shared<GptHead>(c, wte);
      add_layer("transformer", head_);
    }
  }
}

void Gpt::set_chunked_head(bool on) {
  chunked_ = on;
  if (head_) head_->chunked = on;
}

Tensor Gpt::loss(const Tensor& out, const Tensor& targets) const {
  if (!chunked_) return LanguageModel::loss(out, targets);
  ST_CHECK(head_ != nullptr, ValueError, "GPT: loss() on a range of layers without the head");
  ST_CHECK(out.dim() == 3 && out.size(2) == cfg_.n_embd && targets.dim() == 2 && targets.size(0) == out.size(0) &&
               targets.size(1) == out.size(1),
           ShapeError,
           "GPT (chunked head): hidden " << shape_str(out.shape()) << " (expected (B, T, " << cfg_.n_embd
                                         << ")) vs targets " << shape_str(targets.shape()));
  // (B·T, C) against wte (V, C) and targets (B·T) → () f32
  return ops::lm_head_cross_entropy(out.reshape({-1, cfg_.n_embd}), head_->wte, targets.reshape({-1}));
}

void gpt_init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t n_layer, const ElementMap& map) {
  const float std_ = 0.02f, proj_std = static_cast<float>(0.02 / std::sqrt(2.0 * static_cast<double>(n_layer)));
  const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  const bool is_ln = name.find(".ln_") != std::string::npos;
  if (is_ln)
    t.fill_(is_bias ? 0.0 : 1.0);
  else if (is_bias)
    t.fill_(0.0);
  else
    fill_normal_keyed(t, stream_key(seed, name), 0.f,
                      name.find(".c_proj.weight") != std::string::npos ? proj_std : std_, map);
}

void Gpt::init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const {
  NoGradGuard ng;
  gpt_init_parameter(name, t, seed, cfg_.n_layer, ElementMap::whole(parameter(name).numel()).window(first, t.numel()));
}

runtime::ModelDescription describe_gpt(const GptConfig& c, int64_t seq_len) {
  check_gpt_config(c);
  const int64_t C = c.n_embd, V = c.vocab_size, F = 4 * c.n_embd;
  runtime::ModelDescription d;
  d.vocab_size = V;
  d.context_length = c.n_positions;
  d.layers.push_back({"transformer",
                      {{"transformer.wte.weight", {V, C}}, {"transformer.wpe.weight", {c.n_positions, C}}},
                      static_cast<double>(C)});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i);
    d.layers.push_back({p,
                        {{p + ".ln_1.weight", {C}},
                         {p + ".ln_1.bias", {C}},
                         {p + ".attn.c_attn.weight", {C, 3 * C}},
                         {p + ".attn.c_attn.bias", {3 * C}},
                         {p + ".attn.c_proj.weight", {C, C}},
                         {p + ".attn.c_proj.bias", {C}},
                         {p + ".ln_2.weight", {C}},
                         {p + ".ln_2.bias", {C}},
                         {p + ".mlp.c_fc.weight", {C, F}},
                         {p + ".mlp.c_fc.bias", {F}},
                         {p + ".mlp.c_proj.weight", {F, C}},
                         {p + ".mlp.c_proj.bias", {C}}},
                        gpt_block_flops(static_cast<double>(C), static_cast<double>(C), static_cast<double>(F),
                                        static_cast<double>(seq_len))});
  }
  d.layers.push_back({"transformer",
                      {{"transformer.wte.weight", {V, C}}, {"transformer.ln_f.weight", {C}}, {"transformer.ln_f.bias", {C}}},
                      2.0 * static_cast<double>(V * C)});
  return d;
}

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

nlohmann::json Gpt::config_json() const { return gpt_hf_config_json(cfg_); }

}  // namespace st::models
