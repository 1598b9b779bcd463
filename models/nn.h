// Building blocks shared by the models: Linear (Conv1D layout), LayerNorm, Embedding, Dropout.
// Each is a Module whose parameters carry PyTorch/HF local names ("weight", "bias").
//   Linear     x (..., in) · weight (in, out) + bias (out) → (..., out)   [GPT-2 Conv1D layout]
//   LayerNorm  x (..., C), weight (C), bias (C) → (..., C)
//   RmsNorm    x (..., C), weight (C) → (..., C)
//   Embedding  weight (V, C), ids (...) i64 → (..., C)
//   LayerNorm::forward_residual(x[, a])  {r = x + a (x itself without a), ln(r)} as one op whose
//              backward takes both outputs' gradients (ops/add_layernorm.h)
//   Dropout::add_layernorm(x, a, ln)  {r = x + dropout(a), ln(r)} the same way, with the mask
//              forward(a) would draw at that point
//   Dropout    x (B, ...) → x with probability-p zeros, scaled by 1/(1−p) in training; identity in
//              eval or at p = 0. Inside a training step's DropoutScope the mask is a function of
//              (seed, site, call, step, global sequence index), the same in every layout
//              (runtime/nn/dropout_context.h); outside one it advances the generator. The site
//              is the number of the model layer the dropout belongs to (its index in the full
//              model), so a pipeline stage that builds only its layers numbers them as one
//              process does.
// Initialisation is the caller's (each model's init_parameter, keyed by name: init_normal below);
// constructors create zeros / LN ones.
// Backward is the ops' (each writes fresh tensors, =); the autograd engine accumulates (+=) into
// the parameters' .grad(), so K micro-batches' backward calls sum their gradients.
#pragma once
#include <memory>
#include <string>

#include "ops/add_layernorm.h"
#include "ops/add_rmsnorm.h"
#include "runtime/nn/module.h"
#include "tensor/rng.h"

namespace st::models {

using runtime::Module;

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // (in, out), (out) or undefined
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t c, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  ops::ResidualNorm forward_residual(const Tensor& x, const Tensor& a = Tensor()) const;
  Tensor weight, bias;  // (C), (C)
  double eps;
};

// RMSNorm (Llama): x (..., C), weight (C) → (..., C) (ops/rmsnorm.h); forward_residual as LayerNorm's.
class RmsNorm : public Module {
 public:
  explicit RmsNorm(int64_t c, double eps = 1e-6);
  Tensor forward(const Tensor& x) const;
  ops::ResidualNorm forward_residual(const Tensor& x, const Tensor& a = Tensor()) const;
  Tensor weight;  // (C)
  double eps;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  Tensor forward(const Tensor& ids) const;
  Tensor weight;  // (V, C)
  // Hugging Face's nn.Embedding(padding_idx): that row's lookups give its values but no gradient
  // (the row of the weight's gradient from the lookup is exactly 0; a tied head's still reaches
  // it). -1: none. Costs two more (N, C) gathers, two products and a sum per forward when set.
  int64_t padding_idx = -1;

 private:
  mutable Tensor keep_, pad_;  // (V, 1) in the weight's dtype and device: 1 / 0 except at padding_idx
};

class Dropout {
 public:
  // `gen` is the model's shared generator (its (seed, offset) is checkpointed by the trainer);
  // `site`: the index of the owning layer in the full model.
  Dropout(double p, std::shared_ptr<Generator> gen, uint64_t site);
  Tensor forward(const Tensor& x, bool training) const;
  // {r = x + forward(a), y = ln(r)} as one op (x, a (B, ...)), drawing what forward(a) would
  ops::ResidualNorm add_layernorm(const Tensor& x, const Tensor& a, const LayerNorm& ln, bool training) const;
  double p() const { return p_; }

 private:
  double p_;
  std::shared_ptr<Generator> gen_;
  uint64_t site_ = 0;
  mutable uint64_t scope_ = 0, calls_ = 0;  // uses of this site in the current scope
};

// Multi-head causal self-attention core: qkv (B, T, 3A) packed [q | k | v], A = heads·head_dim
// → (B, T, A) (heads concatenated, before the output projection).
Tensor causal_self_attention(const Tensor& qkv, int64_t heads, int64_t head_dim);

// t ← normal(0, std) from the stream keyed by (seed, name), t being the whole tensor `name`.
// Elements [first, first + t.numel()) of parameter `name`, whole: normal(0, std) keyed by (seed, name).
void init_normal(Tensor t, const std::string& name, uint64_t seed, float std, int64_t first, int64_t whole);

}  // namespace st::models
