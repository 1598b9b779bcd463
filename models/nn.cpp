// Building blocks: thin Modules over the ops.
#include "models/nn.h"

#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "runtime/nn/dropout_context.h"

namespace st::models {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  weight = register_parameter("weight", Tensor::zeros({in, out}));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

// x (..., in) · w (in, out) + b (out) → (..., out)
Tensor Linear::forward(const Tensor& x) const { return ops::linear(x, weight, bias); }

LayerNorm::LayerNorm(int64_t c, double e) : eps(e) {
  weight = register_parameter("weight", Tensor::ones({c}));
  bias = register_parameter("bias", Tensor::zeros({c}));
}

// x (..., C) → (..., C)
Tensor LayerNorm::forward(const Tensor& x) const { return ops::layernorm(x, weight, bias, eps); }

// x, a (..., C) → {x + a, ln(x + a)} (..., C) each; without a {x, ln(x)}
ops::ResidualNorm LayerNorm::forward_residual(const Tensor& x, const Tensor& a) const {
  return ops::add_layernorm(x, a, weight, bias, static_cast<float>(eps));
}

RmsNorm::RmsNorm(int64_t c, double e) : eps(e) { weight = register_parameter("weight", Tensor::ones({c})); }

// x (..., C) → (..., C)
Tensor RmsNorm::forward(const Tensor& x) const { return ops::rmsnorm(x, weight, static_cast<float>(eps)); }

// x, a (..., C) → {x + a, rmsnorm(x + a)} (..., C) each; without a {x, rmsnorm(x)}
ops::ResidualNorm RmsNorm::forward_residual(const Tensor& x, const Tensor& a) const {
  return ops::add_rmsnorm(x, a, weight, static_cast<float>(eps));
}

Embedding::Embedding(int64_t num, int64_t dim) { weight = register_parameter("weight", Tensor::zeros({num, dim})); }

// ids (...) i64 → (..., C)
Tensor Embedding::forward(const Tensor& ids) const {
  if (padding_idx < 0) return ops::embedding(weight, ids);
  // on the device, no host read of the ids (a CUDA graph captures it): the masks are lookups too.
  // out = E(w)·keep + E(w.detach())·pad, bit for bit E(w) (x·1 + x·0 = x), the gradient of w
  // through the first term only: dout·0 at the padding positions.
  if (!keep_.defined() || keep_.dtype() != weight.dtype() || keep_.device() != weight.device()) {
    const int64_t V = weight.size(0);
    std::vector<float> keep(static_cast<size_t>(V), 1.f), pad(static_cast<size_t>(V), 0.f);
    keep[static_cast<size_t>(padding_idx)] = 0.f, pad[static_cast<size_t>(padding_idx)] = 1.f;
    keep_ = Tensor::from_vector(keep, {V, 1}, weight.dtype(), weight.device());  // (V, 1)
    pad_ = Tensor::from_vector(pad, {V, 1}, weight.dtype(), weight.device());    // (V, 1)
  }
  Tensor learned = ops::mul(ops::embedding(weight, ids), ops::embedding(keep_, ids));         // (..., C)
  Tensor fixed = ops::mul(ops::embedding(weight.detach(), ids), ops::embedding(pad_, ids));   // (..., C)
  return ops::add(learned, fixed);
}

Dropout::Dropout(double p, std::shared_ptr<Generator> gen, uint64_t site) : p_(p), gen_(std::move(gen)), site_(site) {}

Tensor Dropout::forward(const Tensor& x, bool training) const {
  if (!training || p_ == 0.0) return x;
  const runtime::DropoutContext* ctx = runtime::dropout_context();
  if (!ctx || x.dim() == 0 || x.size(0) == 0) return ops::dropout(x, static_cast<float>(p_), *gen_, training);
  if (ctx->id != scope_) {  // a new micro-batch (or a recomputed forward): count calls from 0
    scope_ = ctx->id;
    calls_ = 0;
  }
  const uint64_t row = static_cast<uint64_t>(x.numel() / x.size(0));  // elements per sequence
  const uint64_t offset = static_cast<uint64_t>(ctx->first_sample) * row;
  if (ctx->seeds)  // a graph-captured step: seed' from device memory (runtime/nn/dropout_context.h)
    return ops::dropout(x, static_cast<float>(p_), ctx->seeds->slot(gen_->seed(), site_, calls_++), offset, training);
  const uint64_t seed = runtime::dropout_seed(gen_->seed(), site_, calls_++, ctx->step);
  return ops::dropout(x, static_cast<float>(p_), seed, offset, training);
}

// The counters are forward's: the same branches in the same order, so the fused op draws the mask
// the unfused forward(a) would (tests/models/test_fused_blocks.cpp compares the two).
ops::ResidualNorm Dropout::add_layernorm(const Tensor& x, const Tensor& a, const LayerNorm& ln, bool training) const {
  const float eps = static_cast<float>(ln.eps), p = static_cast<float>(p_);
  if (!training || p_ == 0.0) return ln.forward_residual(x, a);
  const runtime::DropoutContext* ctx = runtime::dropout_context();
  if (!ctx || a.dim() == 0 || a.size(0) == 0) {  // ops::dropout(a, p, *gen_, training)'s draw
    const uint64_t offset = a.numel() == 0 ? 0 : gen_->advance(static_cast<uint64_t>(a.numel()));
    return ops::dropout_add_layernorm(x, a, p, gen_->seed(), offset, training, ln.weight, ln.bias, eps);
  }
  if (ctx->id != scope_) {
    scope_ = ctx->id;
    calls_ = 0;
  }
  const uint64_t row = static_cast<uint64_t>(a.numel() / a.size(0));  // elements per sequence
  const uint64_t offset = static_cast<uint64_t>(ctx->first_sample) * row;
  if (ctx->seeds)  // a graph-captured step: seed' from device memory (runtime/nn/dropout_context.h)
    return ops::dropout_add_layernorm(x, a, p, ctx->seeds->slot(gen_->seed(), site_, calls_++), offset, training,
                                      ln.weight, ln.bias, eps);
  const uint64_t seed = runtime::dropout_seed(gen_->seed(), site_, calls_++, ctx->step);
  return ops::dropout_add_layernorm(x, a, p, seed, offset, training, ln.weight, ln.bias, eps);
}

Tensor causal_self_attention(const Tensor& qkv, int64_t heads, int64_t head_dim) {
  const int64_t A = heads * head_dim;
  ST_CHECK(qkv.dim() == 3 && qkv.size(2) == 3 * A, ShapeError,
           "attention: qkv must be (B, T, " << 3 * A << "), got " << shape_str(qkv.shape()));
  return ops::causal_attention_qkv(qkv, heads);  // (B, T, A)
}

void init_normal(Tensor t, const std::string& name, uint64_t seed, float std, int64_t first, int64_t whole) {
  Tensor d = t.detach();
  fill_normal_keyed(d, stream_key(seed, name), 0.f, std, ElementMap::whole(whole).window(first, d.numel()));
}

}  // namespace st::models
