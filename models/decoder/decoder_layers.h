// The decoder's three layers, built from its description (decoder_spec.h) and a tensor-parallel
// group (null or of one rank: one process). What splits over tp is decided by the plan
// (decoder_tp_plan.h: the q, k, v / qkv, gate and up projections column-parallel, o and down
// row-parallel, the token embedding and an untied head vocabulary-parallel, the rest whole); the
// layers build each projection as its plan says, so one class serves every tp size:
//   DecoderEmbedding  ids (B, T) i64 → tokens (+ learned positions) → dropout → (B, T, C)
//   DecoderBlock      x (B, T, C) → x + drop(o(attn(norm1(x)))) = h → h + drop(mlp(norm2(h)))
//                     norm1 and norm2 each one op with the residual stream they read
//                     (ops/add_layernorm.h, ops/add_rmsnorm.h); attention on the packed
//                     [q | k | v] of this rank's heads (ops::causal_attention_qkv)
//   DecoderHead       h (B, T, C) → final norm → · Wᵀ (W the tied embedding or its own, (V, C);
//                     under tp this rank's vocabulary rows) → logits (B, T, V or Vp/tp); chunked
//                     (ModelForm::chunked_head): the final norm only, the projection fused
//                     with the loss
// Each layer takes its form when it is built (runtime/nn/model_form.h: the run's plan), never after.
// With one rank every projection is a plain product (the bias in its epilogue) and the GELU MLP
// one op (ops::mlp_gelu), so a one-process model computes what GPT-2's own layers did.
// FP8 (ModelForm::fp8, --precision fp8): the block's four GEMMs — qkv (packed, or q, k, v
// as one), o, up (SwiGLU: gate and up as one), down — run through ops::fp8_linear, each with its
// own scaling state (Fp8LinearState) owned by the block; the MLP is then one node, ops::fp8_mlp
// (up → GELU / SwiGLU → down with the activation and its gradient inside the casts: the bits of
// the three ops), between the tp collectives (runtime::column_input, runtime::row_output). The
// other projections pick their precision in one place, runtime::local_linear (runtime/parallel/tp_layers.h).
// Sequence parallel (ModelForm::sequence_parallel, --sequence-parallel 1; tp > 1, T divisible by tp, no
// dropout): between the layers the residual stream is rank r's positions (B, T/tp, C) — the
// embedding reduce-scatters its vocabulary-parallel partial sums along T (learned positions added
// on the shard), each norm and residual add runs on the shard, each column-parallel GEMM's input
// is all-gathered along T (attention, rotary included, sees the full T), each row-parallel output
// reduce-scattered along T, and the head all-gathers the final norm's output before its
// vocabulary-parallel GEMM. Each gather and each reduce-scatter is one autograd node with its GEMM
// (runtime::column_linear, runtime/parallel/sp_linear.h): the GEMM keeps its input's T-shard and
// gathers it again in its backward, and no (B, T, C) partial sums are kept (FP8: separate nodes).
// The replicated parameters used on the shard (norms, row biases, learned positions) go through
// copy_to_tp, so their gradients are summed over tp. The cached (generation) path never runs
// sequence parallel.
// Context parallel (ModelForm::cp, --cp N > 1; no dropout, no sequence parallelism): the
// model runs on this rank's two chunks of every sequence, (B, 2C, C) in local order
// (runtime/parallel/context_shard.h); the embedding adds the learned positions of the chunks'
// GLOBAL indices, each block's attention is runtime::ring_attention_qkv over the cp group (rotary
// q and k at the global indices), everything else is per token and runs on the chunks as is. The
// cached (generation) path never runs context parallel.
// Backward: the ops' (=); parameters accumulate (+=) through autograd.
#pragma once
#include <memory>
#include <optional>

#include "models/decoder/decoder_spec.h"
#include "models/decoder/rope_tables.h"
#include "models/nn.h"
#include "runtime/nn/kv_cache.h"
#include "runtime/nn/language_model.h"
#include "runtime/nn/model_form.h"
#include "runtime/parallel/context_shard.h"
#include "runtime/parallel/tp_layers.h"

namespace st::models {

// A norm of either kind, with its fused residual forms.
class DecoderNorm : public Module {
 public:
  // `sp`: a tp group of several ranks under sequence parallelism (x a T-shard: the weights, and
  // the bias, enter through copy_to_tp; see the top); null: off
  DecoderNorm(const DecoderSpec& s, int64_t c, runtime::TpGroup sp = nullptr);
  Tensor forward(const Tensor& x) const;                                       // (..., C) → (..., C)
  ops::ResidualNorm forward_residual(const Tensor& x, const Tensor& a = Tensor()) const;  // {x + a, norm(x + a)}
  // {x + drop(a), norm(x + drop(a))}, the mask forward(a) would draw (LayerNorm: one op)
  ops::ResidualNorm dropout_residual(const Tensor& x, const Tensor& a, const Dropout& drop, bool training) const;

 private:
  runtime::TpGroup sp_;  // null: off
  std::shared_ptr<LayerNorm> ln_;
  std::shared_ptr<RmsNorm> rms_;
};

class DecoderEmbedding : public runtime::Layer, public runtime::CachedLayer {
 public:
  // dropout site 0; form: sequence parallel (forward returns this rank's positions (B, T/tp, C)),
  // context parallel (ids are this rank's two chunks (B, 2C); learned positions at their global
  // indices); see the top
  DecoderEmbedding(const DecoderSpec& s, runtime::TpGroup tp, std::shared_ptr<Generator> gen,
                   const runtime::ModelForm& form = {});
  Tensor forward(const Tensor& ids) override;  // ids (B, T) i64 → (B, T, C), replicated over tp
  // ids (B, T) → tokens (+ the positions step.positions) (B, T, C); no dropout (eval)
  Tensor forward_cached(const Tensor& ids, runtime::KvSlot& slot, const runtime::CacheStep& step) override;
  runtime::LayerCost cost(int64_t seq_len) const override;
  Tensor token_weight() const { return tok_w_; }  // (V, C), or this rank's (Vp/tp, C)

 private:
  Tensor tokens(const Tensor& ids) const;  // (..., C)
  DecoderSpec s_;
  std::shared_ptr<Embedding> tok_;                           // one rank
  std::shared_ptr<runtime::VocabParallelEmbedding> tok_tp_;  // several
  std::shared_ptr<Embedding> pos_;                           // learned positions, or null
  Tensor tok_w_;
  Dropout drop_;
  runtime::TpGroup tp_;
  std::shared_ptr<comm::Communicator> cp_;  // context parallel (null: off)
  mutable runtime::ContextPositionCache cp_positions_;  // the chunks' global positions, built once
  bool sp_ = false;
};

class DecoderBlock : public runtime::Layer, public runtime::CachedLayer {
 public:
  // `index`: the block's layer index in the model (1 + its number), its dropout site. `rope`: the
  // model's rotary tables, shared by its blocks (null with rotary positions: the block's own).
  // `form`: sequence parallel, context parallel (x holds this rank's two chunks (B, 2C, C);
  // attention is a ring over the cp group), FP8 GEMMs (fresh scaling states on form.fp8_device);
  // see the top.
  DecoderBlock(const DecoderSpec& s, runtime::TpGroup tp, std::shared_ptr<Generator> gen, int index,
               std::shared_ptr<RopeTables> rope = nullptr, const runtime::ModelForm& form = {});
  Tensor forward(const Tensor& x) override;  // x (B, T, C) → (B, T, C); sequence parallel (B, T/tp, C) → same
  // x (B, T, C) of the step's new positions → (B, T, C), attention over the cached ones (this
  // rank's key/value heads only)
  Tensor forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) override;
  runtime::LayerCost cost(int64_t seq_len) const override;  // this rank's share
  // sp (sequence parallel): h (B, T/tp, C) in, qkv out over the full T, attention / mlp out (B, T/tp, C)
  Tensor qkv(const Tensor& h, bool sp = false) const;        // h (B, T, C) → (B, T, (Hl + 2·Hkv_l)·D) packed, this rank's heads
  Tensor attention(const Tensor& h, bool sp = false) const;  // h (B, T, C) → (B, T, C), o applied (and summed over tp)
  Tensor mlp(const Tensor& h, bool sp = false) const;        // h (B, T, C) → (B, T, C) (summed over tp)
  int64_t local_heads() const { return heads_; }
  int64_t local_kv_heads() const { return kv_heads_; }
  const DecoderNorm& norm1() const { return *norm1_; }
  const DecoderNorm& norm2() const { return *norm2_; }
  bool fp8() const { return fp8_qkv_ != nullptr; }
  // The states by GEMM ("qkv", "o", "up", "down"); empty when off
  std::vector<std::pair<std::string, std::shared_ptr<ops::Fp8LinearState>>> fp8_states() const;

 private:
  DecoderSpec s_;
  runtime::TpGroup tp_;
  // the FP8 scaling of each GEMM (null: bf16): qkv and up also serve the concatenated q|k|v and
  // gate|up products; o's and down's are also set on o_ / down_ (their local GEMM)
  std::shared_ptr<ops::Fp8LinearState> fp8_qkv_, fp8_o_, fp8_up_, fp8_down_;
  int64_t heads_, kv_heads_;  // this rank's
  std::shared_ptr<RopeTables> rope_;  // rotary positions only
  std::shared_ptr<DecoderNorm> norm1_, norm2_;
  std::shared_ptr<runtime::ColumnParallelLinear> qkv_, q_, k_, v_, gate_, up_;
  std::shared_ptr<runtime::RowParallelLinear> o_, down_;
  Dropout drop_;
  std::shared_ptr<comm::Communicator> cp_;  // context parallel (null: off)
  mutable runtime::ContextPositionCache cp_positions_;  // the chunks' global positions, built once
  bool sp_ = false;
};

class DecoderHead : public runtime::Layer, public runtime::CachedLayer {
 public:
  // `weight`: the tied embedding's tensor (V or Vp/tp, C); undefined: the head's own (untied).
  // form: sequence parallel (h arrives as (B, T/tp, C); the final norm's output is all-gathered
  // along T before the GEMM), the chunked head (at tp 1 only: `chunked`).
  DecoderHead(const DecoderSpec& s, runtime::TpGroup tp, Tensor tied, const runtime::ModelForm& form = {});
  Tensor forward(const Tensor& h) override;  // h (B, T, C) → logits (B, T, V or Vp/tp); chunked: norm(h) (B, T, C)
  Tensor logits(const Tensor& h, bool sp = false) const;  // h (B, T, C) → logits, whatever `chunked`; sp: h (B, T/tp, C)
  Tensor forward_cached(const Tensor& h, runtime::KvSlot&, const runtime::CacheStep&) override { return logits(h); }
  runtime::LayerCost cost(int64_t seq_len) const override;
  Tensor weight;  // (V, C), or this rank's rows (Vp/tp, C)
  bool chunked = false;

 private:
  std::shared_ptr<DecoderNorm> norm_;
  runtime::TpGroup tp_;
  bool sp_ = false;
};

}  // namespace st::models
