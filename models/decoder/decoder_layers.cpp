// The decoder's layers (see the header).
#include "models/decoder/decoder_layers.h"

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/fp8_mlp.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "runtime/parallel/context_shard.h"
#include "runtime/parallel/ring_attention_qkv.h"
#include "tensor/autograd.h"
#include "tensor/allocate_now.h"
#include "tensor/memory_category.h"

namespace st::models {
namespace {

// The local name of a parameter of scope `full`'s layer, relative to that layer's scope.
std::string relative(const std::string& full, const std::string& scope) {
  if (scope.empty()) return full;
  ST_CHECK(full.compare(0, scope.size() + 1, scope + ".") == 0, ValueError,
           "decoder: '" << full << "' is not under the layer scope '" << scope << "'");
  return full.substr(scope.size() + 1);
}

// cat([a, b, ...]) of projection weights (or biases) along their output dim: one GEMM for several
// projections of the same input (autograd splits the gradient back)
Tensor cat_out(const std::vector<Tensor>& parts, const DecoderSpec& s, bool bias) {
  const int64_t dim = bias || s.layout == WeightLayout::out_in ? 0 : 1;
  return Tensor::cat(parts, dim);
}

}  // namespace

// ---- norm -------------------------------------------------------------------------------------

DecoderNorm::DecoderNorm(const DecoderSpec& s, int64_t c, runtime::TpGroup sp) : sp_(std::move(sp)) {
  if (s.norm == NormKind::layernorm)
    ln_ = register_module("", std::make_shared<LayerNorm>(c, s.norm_eps));
  else
    rms_ = register_module("", std::make_shared<RmsNorm>(c, s.norm_eps));
}

Tensor DecoderNorm::forward(const Tensor& x) const {
  if (sp_) {  // x a T-shard: the weights through copy_to_tp (their gradients summed over tp)
    if (ln_) return ops::layernorm(x, runtime::copy_to_tp(ln_->weight, sp_), runtime::copy_to_tp(ln_->bias, sp_),
                                      static_cast<float>(ln_->eps));
    return ops::rmsnorm(x, runtime::copy_to_tp(rms_->weight, sp_), static_cast<float>(rms_->eps));
  }
  return ln_ ? ln_->forward(x) : rms_->forward(x);
}

ops::ResidualNorm DecoderNorm::forward_residual(const Tensor& x, const Tensor& a) const {
  if (sp_) {  // x a T-shard: the weights through copy_to_tp (their gradients summed over tp)
    if (ln_)
      return ops::add_layernorm(x, a, runtime::copy_to_tp(ln_->weight, sp_), runtime::copy_to_tp(ln_->bias, sp_),
                                static_cast<float>(ln_->eps));
    return ops::add_rmsnorm(x, a, runtime::copy_to_tp(rms_->weight, sp_), static_cast<float>(rms_->eps));
  }
  return ln_ ? ln_->forward_residual(x, a) : rms_->forward_residual(x, a);
}

ops::ResidualNorm DecoderNorm::dropout_residual(const Tensor& x, const Tensor& a, const Dropout& drop,
                                                bool training) const {
  // sequence parallel runs without dropout (the DecoderModel's check): drop is the identity
  if (sp_) return forward_residual(x, drop.forward(a, training));
  if (ln_) return drop.add_layernorm(x, a, *ln_, training);
  return rms_->forward_residual(x, drop.forward(a, training));
}

// ---- embedding --------------------------------------------------------------------------------

DecoderEmbedding::DecoderEmbedding(const DecoderSpec& s, runtime::TpGroup tp, std::shared_ptr<Generator> gen,
                                   const runtime::ModelForm& form)
    : s_(s), drop_(s.embd_pdrop, std::move(gen), /*site=*/0), tp_(tp),
      cp_(form.context_parallel() ? form.cp : nullptr), sp_(form.sequence_parallel) {
  if (runtime::tp_size(tp) > 1) {
    tok_tp_ = register_module(s.names.tok_embed, std::make_shared<runtime::VocabParallelEmbedding>(s.vocab, s.d_model, tp));
    tok_tp_->padding_idx = s.padding_idx;
    tok_w_ = tok_tp_->weight;
  } else {
    tok_ = register_module(s.names.tok_embed, std::make_shared<Embedding>(s.vocab, s.d_model));
    tok_->padding_idx = s.padding_idx;
    tok_w_ = tok_->weight;
  }
  if (s.position == PositionKind::learned)
    pos_ = register_module(s.names.pos_embed, std::make_shared<Embedding>(s.context, s.d_model));
}

Tensor DecoderEmbedding::tokens(const Tensor& ids) const { return tok_ ? tok_->forward(ids) : tok_tp_->forward(ids); }

Tensor DecoderEmbedding::forward(const Tensor& ids) {
  ST_CHECK(ids.dim() == 2, ShapeError, s_.family << ": token ids must be (B, T), got " << shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  ST_CHECK(T <= s_.context, ShapeError,
           s_.family << ": sequence length " << T << " exceeds the context length " << s_.context);
  if (sp_ && tok_tp_) {  // this rank's positions [r·T/tp, (r+1)·T/tp): the partial sums reduce-scattered along T
    const int p = runtime::tp_size(tp_);
    ST_CHECK(T % p == 0, ShapeError,
             s_.family << ": sequence parallel needs the sequence length " << T << " to divide by tp " << p);
    const int64_t n = T / p;
    Tensor x = runtime::reduce_scatter_seq_to_sp(tok_tp_->forward_partial(ids), tp_);  // (B, T/tp, C)
    // the whole table through copy_to_tp, then this rank's rows: each rank's gradient lands on its
    // own positions (zeros elsewhere) and the sum over tp assembles the full one
    if (pos_) x = ops::add(x, runtime::copy_to_tp(pos_->weight, tp_).narrow(0, runtime::tp_rank(tp_) * n, n));
    return drop_.forward(x, is_training());  // p = 0 (sequence parallel runs without dropout)
  }
  if (cp_) {  // ids: this rank's two chunks (B, 2C) of sequences of cp · 2C tokens
    const int64_t n = cp_->size(), global = T * n;
    ST_CHECK(global <= s_.context, ShapeError,
             s_.family << ": sequence length " << global << " (cp " << n << " x " << T << ") exceeds the context length "
                       << s_.context);
    Tensor x = tokens(ids);  // (B, 2C, C)
    if (pos_) {              // the rows of the chunks' global positions (2C, C), broadcast over B
      const Tensor& at = cp_positions_.get(global, n, cp_->rank(), ops::ContextSplit::load_balanced, ids.device());
      x = ops::add(x, pos_->forward(at));
    }
    return x;  // no dropout under cp (the DecoderModel's check)
  }
  Tensor x = tokens(ids);                                                   // (B, T, C)
  if (pos_) x = ops::add(x, pos_->weight.narrow(0, 0, T));                  // (T, C), broadcast over B
  return drop_.forward(x, is_training());
}

Tensor DecoderEmbedding::forward_cached(const Tensor& ids, runtime::KvSlot&, const runtime::CacheStep& step) {
  ST_CHECK(ids.dim() == 2 && ids.size(1) == step.new_tokens, ShapeError,
           s_.family << ": cached token ids must be (B, " << step.new_tokens << "), got " << shape_str(ids.shape()));
  Tensor x = tokens(ids);  // (B, T, C)
  return pos_ ? ops::add(x, pos_->forward(step.positions)) : x;
}

runtime::LayerCost DecoderEmbedding::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), static_cast<double>(s_.d_model)};  // one add per channel
}

// ---- block ------------------------------------------------------------------------------------

DecoderBlock::DecoderBlock(const DecoderSpec& s, runtime::TpGroup tp, std::shared_ptr<Generator> gen, int index,
                           std::shared_ptr<RopeTables> rope, const runtime::ModelForm& form)
    : s_(s),
      tp_(std::move(tp)),
      drop_(s.resid_pdrop, std::move(gen), static_cast<uint64_t>(index)),
      cp_(form.context_parallel() ? form.cp : nullptr),
      sp_(form.sequence_parallel) {
  if (s.position == PositionKind::rotary) rope_ = rope ? std::move(rope) : std::make_shared<RopeTables>(s);
  const int p = runtime::tp_size(tp_);
  s.check_tp(p);
  heads_ = s.heads / p;
  kv_heads_ = s.kv_heads / p;
  const int64_t C = s.d_model, F = s.ffn;
  const bool out_in = s.layout == WeightLayout::out_in;
  const DecoderNames& n = s.names;
  auto column = [&](const std::string& name, int64_t out, bool bias) {
    return register_module(name, std::make_shared<runtime::ColumnParallelLinear>(C, out, tp_, bias, false, out_in));
  };
  auto row = [&](const std::string& name, int64_t in, bool bias) {
    return register_module(name, std::make_shared<runtime::RowParallelLinear>(in, C, tp_, bias, true, out_in));
  };
  const runtime::TpGroup sp_group = sp_ ? tp_ : nullptr;
  norm1_ = register_module(n.norm1, std::make_shared<DecoderNorm>(s, C, sp_group));
  if (!n.qkv.empty()) {
    qkv_ = column(n.qkv, s.qkv_width(), s.qkv_bias);  // this rank's [q_r | k_r | v_r] (the plan's 3 chunks)
  } else {
    q_ = column(n.q, s.q_width(), s.qkv_bias);
    k_ = column(n.k, s.kv_width(), s.qkv_bias);
    v_ = column(n.v, s.kv_width(), s.qkv_bias);
  }
  o_ = row(n.o, s.q_width(), s.o_bias);
  norm2_ = register_module(n.norm2, std::make_shared<DecoderNorm>(s, C, sp_group));
  if (s.mlp == MlpKind::swiglu) gate_ = column(n.gate, F, s.mlp_bias);
  up_ = column(n.up, F, s.mlp_bias);
  down_ = row(n.down, F, s.mlp_bias);
  if (form.fp8) {
    // the scaling states are no parameters: their bytes now, also in a ZeRO-3 build (which defers
    // the parameters'), counted as other memory as before they were part of the build
    AllocateNow now;
    MemoryCategoryScope mem(MemoryCategory::other);
    auto make = [&] { return std::make_shared<ops::Fp8LinearState>(ops::fp8_linear_state(*form.fp8, form.fp8_device)); };
    fp8_qkv_ = make();
    fp8_o_ = make();
    fp8_up_ = make();
    fp8_down_ = make();
    if (qkv_) qkv_->fp8 = fp8_qkv_;
    o_->fp8 = fp8_o_;  // up and down: the MLP's states, read by ops::fp8_mlp in mlp() below
  }
}

Tensor DecoderBlock::qkv(const Tensor& h, bool sp) const {
  if (qkv_) return qkv_->forward(h, sp);  // (B, T, 3A/tp)
  // q, k, v as one GEMM of their concatenated weights: (B, T, (Hl + 2·Hkv_l)·D)
  Tensor w = cat_out({q_->weight, k_->weight, v_->weight}, s_, false);
  Tensor b = s_.qkv_bias ? cat_out({q_->bias, k_->bias, v_->bias}, s_, true) : Tensor();
  // h (B, T, C), or under sp (B, T/tp, C) gathered inside the product → (B, T, ...)
  return runtime::column_linear(h, w, b, s_.layout == WeightLayout::out_in, fp8_qkv_.get(), tp_, sp);
}

std::vector<std::pair<std::string, std::shared_ptr<ops::Fp8LinearState>>> DecoderBlock::fp8_states() const {
  if (!fp8()) return {};
  return {{"qkv", fp8_qkv_}, {"o", fp8_o_}, {"up", fp8_up_}, {"down", fp8_down_}};
}

Tensor DecoderBlock::attention(const Tensor& h, bool sp) const {
  // h (B, T, C) → qkv (B, T, (Hl + 2·Hkv_l)·D) → this rank's heads (B, T, Hl·D) → o → (B, T, C);
  // multi-head without rope: the GPT's op (its bits and its memory plan), else grouped-query with
  // q and k rotated as the kernels read them
  Tensor packed = qkv(h, sp);  // (B, T, ...) the full sequence (sp: gathered)
  if (cp_) {  // the rank's two chunks (B, 2C, ...): a ring over the cp group, rope at the global positions
    const int64_t n = cp_->size(), Tl = packed.size(1);
    const ops::RopeTable* table = rope_ ? rope_->covering(Tl * n) : nullptr;
    const Tensor at = rope_ ? cp_positions_.get(Tl * n, n, cp_->rank(), ops::ContextSplit::load_balanced, packed.device())
                            : Tensor();
    return o_->forward(runtime::ring_attention_qkv(packed, heads_, kv_heads_, cp_, table, at), sp);
  }
  if (!rope_ && kv_heads_ == heads_) return o_->forward(ops::causal_attention_qkv(packed, heads_), sp);
  const ops::RopeTable* table = rope_ ? rope_->covering(packed.size(1)) : nullptr;
  return o_->forward(ops::causal_attention_qkv(packed, heads_, kv_heads_, table), sp);
}

Tensor DecoderBlock::mlp(const Tensor& h, bool sp) const {
  const bool gelu = s_.mlp == MlpKind::gelu, oi = s_.layout == WeightLayout::out_in;
  // one rank: gelu_tanh(h·W_up + b_up)·W_down + b_down as one op, so CUDA fuses bias and GELU into the GEMMs
  if (gelu && runtime::tp_size(tp_) == 1 && !oi && s_.mlp_bias && !fp8())
    return ops::mlp_gelu(h, up_->weight, up_->bias, down_->weight, down_->bias);
  // SwiGLU: gate and up as one GEMM of their concatenated weights → [gate | up] (B, T, 2F/tp)
  Tensor w = gelu ? up_->weight : cat_out({gate_->weight, up_->weight}, s_, false);
  Tensor b = gelu ? up_->bias : s_.mlp_bias ? cat_out({gate_->bias, up_->bias}, s_, true) : Tensor();
  if (fp8()) {  // up, the activation and down in FP8 as one node (the activation inside the casts), any tp
    const bool one = runtime::tp_size(tp_) == 1;
    Tensor y = ops::fp8_mlp(runtime::column_input(h, tp_, sp), {w, b, down_->weight, one ? down_->bias : Tensor(), oi},
                            gelu ? ops::Fp8MlpAct::gelu : ops::Fp8MlpAct::swiglu, *fp8_up_, *fp8_down_);
    return one ? y : runtime::row_output(y, down_->bias, tp_, sp);  // (B, T, C), sp: (B, T/tp, C)
  }
  // several ranks: column-parallel up, the activation, row-parallel down
  // h (B, T, C), or under sp (B, T/tp, C) gathered inside the product → (B, T, U/tp)
  Tensor pre = runtime::column_linear(h, w, b, oi, nullptr, tp_, sp);
  return down_->forward(gelu ? ops::gelu(pre) : ops::swiglu(pre), sp);  // (B, T, C)
}

Tensor DecoderBlock::forward(const Tensor& x) {
  ST_CHECK(x.dim() == 3 && x.size(2) == s_.d_model, ShapeError,
           s_.family << " block: input must be (B, T, " << s_.d_model << "), got " << shape_str(x.shape()));
  // norm1 and norm2 each as one op with the residual stream they read: x's two gradients (the
  // residual's, norm1's) meet in norm1's backward, h = x + drop(attn) is formed in norm2's
  // forward; the block's last add stays (the final norm / the next block's norm1 is another layer)
  ops::ResidualNorm s1 = norm1_->forward_residual(x);                                          // {x, norm1(x)}
  ops::ResidualNorm s2 = norm2_->dropout_residual(s1.r, attention(s1.y, sp_), drop_, is_training());  // {h, norm2(h)}
  return ops::add(s2.r, drop_.forward(mlp(s2.y, sp_), is_training()));
}

runtime::LayerCost DecoderBlock::cost(int64_t seq_len) const {
  return {static_cast<double>(param_bytes()),
          block_flops(s_, static_cast<double>(seq_len), runtime::tp_size(tp_))};
}

// ---- head -------------------------------------------------------------------------------------

DecoderHead::DecoderHead(const DecoderSpec& s, runtime::TpGroup tp, Tensor tied, const runtime::ModelForm& form)
    : tp_(std::move(tp)), sp_(form.sequence_parallel) {
  const int p = runtime::tp_size(tp_);
  chunked = form.chunked_head && p == 1;  // the vocabulary-parallel loss needs every rank's logits
  const int64_t rows = p > 1 ? runtime::pad_vocab(s.vocab, p) / p : s.vocab;
  const std::string& scope = s.names.head_scope;
  // the weight first (registration order: the checkpoints' and the optimizer's order), then the norm
  if (s.tied_head) {
    weight = tied.defined() ? tied : Tensor::zeros({rows, s.d_model});  // a stage's own copy of the tied weight
    register_parameter(relative(join(join(s.names.embed_scope, s.names.tok_embed), "weight"), scope), weight);
  } else {
    weight = register_parameter(s.names.lm_head + ".weight", Tensor::zeros({rows, s.d_model}));
  }
  norm_ = register_module(s.names.final_norm, std::make_shared<DecoderNorm>(s, s.d_model, sp_ ? tp_ : nullptr));
}

// h (B, T, C) → norm → (copy_to_tp) → · Wᵀ (C, V or Vp/tp) → (B, T, V or Vp/tp);
// sequence parallel: h (B, T/tp, C) → norm → all-gather along T → (B, T, C) → · Wᵀ, the gather and
// the product one node (runtime::column_linear: the norm's T-shard kept, not the gathered output)
Tensor DecoderHead::logits(const Tensor& h, bool sp) const {
  if (sp) return runtime::column_linear(norm_->forward(h), weight, Tensor(), /*out_in=*/true, nullptr, tp_, true);
  return ops::matmul(runtime::column_input(norm_->forward(h), tp_, false), weight, false, true);
}

// chunked: h (B, T, C) → norm → (B, T, C), the projection left to DecoderModel::loss
Tensor DecoderHead::forward(const Tensor& h) { return chunked ? norm_->forward(h) : logits(h, sp_); }

runtime::LayerCost DecoderHead::cost(int64_t) const {
  return {static_cast<double>(param_bytes()), 2.0 * static_cast<double>(weight.size(0) * weight.size(1))};
}

}  // namespace st::models
