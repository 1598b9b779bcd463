// Tensor-parallel GPT-2: layers from runtime/parallel/tp_layers.h, full-tensor init / load / gather by name.
#include "models/gpt_tp.h"

#include <cmath>
#include <set>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"

namespace st::models {
// ---- embedding --------------------------------------------------------------------------------

TpGptEmbedding::TpGptEmbedding(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen)
    : drop_(c.embd_pdrop, std::move(gen), /*site=*/0) {
  wte = register_module("wte", std::make_shared<runtime::VocabParallelEmbedding>(c.vocab_size, c.n_embd, tp));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd));
}

Tensor TpGptEmbedding::forward(const Tensor& ids) {
  ST_CHECK(ids.dim() == 2, ShapeError, "GPT: token ids must be (B, T), got " << shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  ST_CHECK(T <= wpe->weight.size(0), ShapeError,
           "GPT: sequence length " << T << " exceeds the context length " << wpe->weight.size(0));
  Tensor tok = wte->forward(ids);            // (B, T, C), summed over the tp group
  Tensor pos = wpe->weight.narrow(0, 0, T);  // (T, C), broadcast over B
  return drop_.forward(ops::add(tok, pos), is_training());
}

runtime::LayerCost TpGptEmbedding::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), static_cast<double>(wpe->weight.size(1))};
}

// ---- block ------------------------------------------------------------------------------------

TpGptBlock::TpGptBlock(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen, int index)
    : n_embd_(c.n_embd), drop_(c.resid_pdrop, std::move(gen), static_cast<uint64_t>(index)) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  attn = register_module("attn", std::make_shared<runtime::TpSelfAttention>(c.n_embd, c.n_head, tp));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  mlp = register_module("mlp", std::make_shared<runtime::TpMlp>(c.n_embd, 4 * c.n_embd, tp));
}

Tensor TpGptBlock::forward(const Tensor& x) {
  ST_CHECK(x.dim() == 3 && x.size(2) == n_embd_, ShapeError,
           "GPT block: input must be (B, T, " << n_embd_ << "), got " << shape_str(x.shape()));
  // as GptBlock::forward: ln_1 and ln_2 fused with the residual stream they read
  ops::ResidualNorm s1 = ln_1->forward_residual(x);                                  // {x, ln_1(x)}
  ops::ResidualNorm s2 = drop_.add_layernorm(s1.r, attn->forward(s1.y), *ln_2, is_training());  // {h, ln_2(h)}
  return ops::add(s2.r, drop_.forward(mlp->forward(s2.y), is_training()));
}

runtime::LayerCost TpGptBlock::cost(int64_t seq_len) const {  // this rank's heads and MLP columns
  return {static_cast<double>(param_bytes()),
          gpt_block_flops(static_cast<double>(n_embd_), static_cast<double>(attn->local_heads * attn->head_dim),
                          static_cast<double>(mlp->c_fc->out_local), static_cast<double>(seq_len))};
}

// ---- head -------------------------------------------------------------------------------------

TpGptHead::TpGptHead(const GptConfig& c, runtime::TpGroup tp, Tensor wte_shard)
    : wte(std::move(wte_shard)), tp_(std::move(tp)) {
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  register_parameter("wte.weight", wte);  // the embedding's shard (tied)
}

// h (B, T, C) → ln_f → copy_to_tp (grad all-reduced) → · wte_shardᵀ (C, Vp/tp) → (B, T, Vp/tp)
Tensor TpGptHead::forward(const Tensor& h) {
  return ops::matmul(runtime::copy_to_tp(ln_f->forward(h), tp_), wte, false, true);
}

runtime::LayerCost TpGptHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(wte.size(0) * wte.size(1))};
}

// ---- model ------------------------------------------------------------------------------------

TpGpt::TpGpt(const GptConfig& c, runtime::TpGroup tp, std::shared_ptr<Generator> gen, std::vector<runtime::LayerRange> ranges)
    : cfg_(c), tp_(std::move(tp)) {
  const int p = runtime::tp_size(tp_);
  check_gpt_config(c);
  ST_CHECK(c.n_head % p == 0, ValueError, "GPT: heads " << c.n_head << " are not divisible by tp " << p);
  set_generator(gen);
  std::shared_ptr<TpGptEmbedding> emb;
  for (int i : set_layer_ranges(std::move(ranges), static_cast<int>(c.n_layer) + 2)) {
    if (i == 0) {
      emb = std::make_shared<TpGptEmbedding>(c, tp_, gen);
      add_layer("transformer", emb);
    } else if (i <= c.n_layer) {
      add_layer("transformer.h." + std::to_string(i - 1), std::make_shared<TpGptBlock>(c, tp_, gen, i));
    } else {  // the embedding's shard, or this stage's own copy of it (Vp/tp, C)
      Tensor wte = emb ? emb->wte->weight : Tensor::zeros({runtime::pad_vocab(c.vocab_size, p) / p, c.n_embd});
      add_layer("transformer", std::make_shared<TpGptHead>(c, tp_, wte));
    }
  }
}

Shape TpGpt::full_shape(const std::string& name) const {
  const runtime::ShardSpec s = shard_rule()(name);
  Shape shape = parameter(name).shape();
  if (s.kind == runtime::ShardSpec::Kind::replicated) return shape;
  const int64_t d = wrap_dim(s.dim, static_cast<int64_t>(shape.size()), "full_shape");
  shape[d] = s.pad_to_tp ? s.full_size : shape[d] * runtime::tp_size(tp_);
  return shape;
}

// Gpt's rule, each shard drawing its elements of the full tensor's stream.
void TpGpt::init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const {
  const int p = runtime::tp_size(tp_), r = runtime::tp_rank(tp_);
  const Shape full = full_shape(name);
  NoGradGuard ng;
  gpt_init_parameter(name, t, seed, cfg_.n_layer,
                     runtime::element_map(runtime::shard_slice(shard_rule()(name), full, p, r), full).window(first, t.numel()));
}

void TpGpt::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  const runtime::ShardRule rule = shard_rule();
  const int p = runtime::tp_size(tp_), r = runtime::tp_rank(tp_);
  std::map<std::string, Tensor> local;
  std::set<std::string> mine;
  for (auto& [name, param] : named_parameters()) {  // check everything before sharding anything
    mine.insert(name);
    auto it = full.find(name);
    ST_CHECK(it != full.end(), ValueError, "load_full_state_dict: missing key '" << name << "'");
    ST_CHECK(it->second.shape() == full_shape(name), ValueError,
             "load_full_state_dict: '" << name << "' has shape " << shape_str(it->second.shape())
                                       << ", the full model expects " << shape_str(full_shape(name)));
  }
  if (strict)
    for (auto& [name, t] : full)
      ST_CHECK(mine.count(name), ValueError, "load_full_state_dict: unexpected key '" << name << "'");
  for (const std::string& name : mine) local[name] = runtime::shard_tensor(full.at(name), rule(name), p, r);
  load_state_dict(local, true);
}

runtime::NamedTensors TpGpt::full_state_dict() const {
  if (runtime::tp_size(tp_) == 1) return state_dict();
  return runtime::gather_state_dict(state_dict(), shard_rule(), *tp_);
}

Tensor TpGpt::loss(const Tensor& local_logits, const Tensor& targets) const {
  return runtime::vocab_parallel_cross_entropy(local_logits, targets, tp_, cfg_.vocab_size);
}

Tensor TpGpt::gather_logits(const Tensor& local_logits) const {
  Tensor all = runtime::gather_from_tp(local_logits, tp_);  // (B, T, Vp)
  return all.narrow(-1, 0, cfg_.vocab_size);                // (B, T, V)
}

nlohmann::json TpGpt::config_json() const { return gpt_hf_config_json(cfg_); }

}  // namespace st::models
