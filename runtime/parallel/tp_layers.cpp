// Tensor-parallel layers: column/row-parallel linears, attention split by heads, MLP split by the
// hidden dim, vocab-parallel embedding and cross-entropy (see tp_layers.h).
#include "runtime/parallel/tp_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu_math/elementary.h"  // exp/log with the same bits on every CPU (docs/testing.md)
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "runtime/parallel/sp_linear.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// ids / targets (...) i32/i64 on any device → host int64 values.
std::vector<int64_t> host_ids(const Tensor& t, const char* op) {
  ST_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, DTypeError,
           op << ": ids must be i32 or i64, got " << t.describe());
  Tensor h = t.detach().to(Device::cpu).contiguous();
  std::vector<int64_t> out(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::i32) {
    const int32_t* p = h.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    const int64_t* p = h.data<int64_t>();
    std::copy(p, p + out.size(), out.begin());
  }
  return out;
}

// What the vocab-parallel cross-entropy keeps for backward (host, f32).
struct VocabCeSaved {
  Tensor x;                     // (N, Vl) this rank's logits
  std::vector<float> lse;       // (N) global log-sum-exp per row
  std::vector<int64_t> target;  // (N) global target ids
  int64_t counted, N, Vl, start, nvalid, ignore_index;
};

// dlogits (N, Vl) f32 host = (exp(x − lse) − [c = t − start])·dloss/count on the valid columns,
// 0 on padded columns and on ignored rows.
Tensor vocab_ce_grad(const VocabCeSaved& s, double dloss) {
  const float k = s.counted > 0 ? static_cast<float>(dloss / static_cast<double>(s.counted)) : 0.f;
  const float* px = s.x.data<float>();
  Tensor d = Tensor::zeros({s.N, s.Vl}, DType::f32);  // (N, Vl)
  float* pd = d.data<float>();
  for (int64_t n = 0; n < s.N; ++n) {
    const int64_t t = s.target[static_cast<size_t>(n)];
    if (t == s.ignore_index) continue;
    for (int64_t c = 0; c < s.nvalid; ++c) pd[n * s.Vl + c] = ops::cpu::exp_f32(px[n * s.Vl + c] - s.lse[n]) * k;
    if (t - s.start >= 0 && t - s.start < s.nvalid) pd[n * s.Vl + (t - s.start)] -= k;
  }
  return d;
}

}  // namespace

int64_t pad_vocab(int64_t vocab, int tp) {
  ST_CHECK(vocab >= 1 && tp >= 1, ValueError, "pad_vocab: vocab " << vocab << " and tp " << tp << " must be >= 1");
  return (vocab + tp - 1) / tp * tp;
}

// ---- linears ----------------------------------------------------------------------------------

Tensor local_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, ops::Fp8LinearState* fp8) {
  if (!fp8) return out_in ? ops::linear_nt(x, w, b) : ops::linear(x, w, b);
  return ops::fp8_linear(x, w, b, *fp8, out_in);  // an (N, K) weight cast as stored (ops/fp8_linear.h)
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_, int64_t out_full_, TpGroup tp, bool has_bias, bool gather,
                                           bool weight_out_in)
    : in(in_), out_full(out_full_), gather_output(gather), out_in(weight_out_in), tp_(std::move(tp)) {
  const int p = tp_size(tp_);
  ST_CHECK(out_full % p == 0, ValueError,
           "ColumnParallelLinear: output width " << out_full << " does not divide by tp " << p);
  out_local = out_full / p;
  weight = register_parameter("weight", out_in ? Tensor::zeros({out_local, in})    // (out/tp, in)
                                               : Tensor::zeros({in, out_local}));  // (in, out/tp)
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out_local}));     // (out/tp)
}

Tensor column_input(const Tensor& x, const TpGroup& tp, bool sequence_parallel) {
  return sequence_parallel ? gather_seq_from_sp(x, tp) : copy_to_tp(x, tp);
}

Tensor sp_param(const Tensor& w, const TpGroup& tp, bool sequence_parallel) {
  return sequence_parallel && w.defined() ? copy_to_tp(w, tp) : w;
}

Tensor column_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, ops::Fp8LinearState* fp8,
                     const TpGroup& tp, bool sequence_parallel) {
  // sequence parallel (no FP8): the gather and the GEMM one node, keeping x's T-shard, not the gathered X
  if (sequence_parallel && tp_size(tp) > 1 && !fp8) return sp_column_linear(x, w, b, out_in, tp);  // (B, T, N)
  return local_linear(column_input(x, tp, sequence_parallel), w, b, out_in, fp8);  // (..., N)
}

Tensor ColumnParallelLinear::forward(const Tensor& x, bool sequence_parallel) const {
  ST_CHECK(x.dim() >= 1 && x.size(-1) == in, ShapeError,
           "ColumnParallelLinear: input must be (..., " << in << "), got " << shape_str(x.shape()));
  // (..., out/tp); sequence parallel: x (B, T/tp, in) → (B, T, out/tp)
  Tensor y = column_linear(x, weight, bias, out_in, fp8.get(), tp_, sequence_parallel);
  return gather_output ? gather_from_tp(y, tp_) : y;  // (..., out) in shard order
}

RowParallelLinear::RowParallelLinear(int64_t in_full_, int64_t out_, TpGroup tp, bool has_bias, bool parallel_in,
                                     bool weight_out_in)
    : in_full(in_full_), out(out_), input_is_parallel(parallel_in), out_in(weight_out_in), tp_(std::move(tp)) {
  const int p = tp_size(tp_);
  ST_CHECK(in_full % p == 0, ValueError,
           "RowParallelLinear: input width " << in_full << " does not divide by tp " << p);
  in_local = in_full / p;
  weight = register_parameter("weight", out_in ? Tensor::zeros({out, in_local})    // (out, in/tp)
                                               : Tensor::zeros({in_local, out}));  // (in/tp, out)
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}));           // (out) replicated
}

Tensor RowParallelLinear::forward(const Tensor& x, bool sequence_parallel) const {
  Tensor xin = input_is_parallel ? x : scatter_to_tp(x, tp_);  // (..., in/tp)
  ST_CHECK(xin.dim() >= 1 && xin.size(-1) == in_local, ShapeError,
           "RowParallelLinear: local input must be (..., " << in_local << "), got " << shape_str(xin.shape()));
  auto product = [&](const Tensor& b) { return local_linear(xin, weight, b, out_in, fp8.get()); };
  if (tp_size(tp_) == 1) return product(bias);     // one rank: the bias in the product, as a plain linear
  if (sequence_parallel && !fp8) {
    // (B, T/tp, out) Σ over ranks, this rank's positions: the GEMM and the reduce-scatter one node
    // (sp_linear.h: the (B, T, out) partial sums are not kept)
    Tensor y = sp_row_linear(xin, weight, out_in, tp_);
    return bias.defined() ? ops::add(y, sp_param(bias, tp_, true)) : y;
  }
  return row_output(product(Tensor()), bias, tp_, sequence_parallel);
}

Tensor row_output(const Tensor& partial, const Tensor& bias, const TpGroup& tp, bool sequence_parallel) {
  if (tp_size(tp) == 1) return bias.defined() ? ops::add(partial, bias) : partial;
  if (sequence_parallel) {  // (B, T/tp, out) Σ over ranks, this rank's positions
    Tensor y = reduce_scatter_seq_to_sp(partial, tp);
    return bias.defined() ? ops::add(y, sp_param(bias, tp, true)) : y;
  }
  Tensor y = reduce_from_tp(partial, tp);        // (..., out) Σ over ranks
  return bias.defined() ? ops::add(y, bias) : y;  // bias once, after the sum
}

// ---- vocab-parallel embedding -----------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(int64_t v, int64_t dim, TpGroup tp) : vocab(v), tp_(std::move(tp)) {
  const int p = tp_size(tp_);
  padded_vocab = pad_vocab(vocab, p);
  vocab_local = padded_vocab / p;
  vocab_start = tp_rank(tp_) * vocab_local;
  weight = register_parameter("weight", Tensor::zeros({vocab_local, dim}));  // (Vp/tp, C)
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  Tensor part = forward_partial(ids);  // (..., C)
  return reduce_from_tp(part, tp_);    // (..., C) Σ over ranks
}

Tensor VocabParallelEmbedding::forward_partial(const Tensor& ids) const {
  const std::vector<int64_t> all = host_ids(ids, "VocabParallelEmbedding");
  const int64_t N = static_cast<int64_t>(all.size()), C = weight.size(1);
  std::vector<int64_t> local(all.size());
  std::vector<float> keep(all.size()), pad(all.size(), 0.f);
  bool any_pad = false;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = all[static_cast<size_t>(i)];
    ST_CHECK(id >= 0 && id < vocab, ValueError,
             "VocabParallelEmbedding: id " << id << " at position " << i << " is outside [0, " << vocab << ")");
    const bool mine = id >= vocab_start && id < vocab_start + vocab_local;
    local[static_cast<size_t>(i)] = mine ? id - vocab_start : 0;
    keep[static_cast<size_t>(i)] = mine ? 1.f : 0.f;
    if (mine && id == padding_idx) {  // its values, no gradient: taken from the detached weight below
      keep[static_cast<size_t>(i)] = 0.f, pad[static_cast<size_t>(i)] = 1.f;
      any_pad = true;
    }
  }
  Tensor lid = Tensor::from_vector(local, {N}, weight.device());                     // (N) i64
  Tensor mask = Tensor::from_vector(keep, {N, 1}, weight.dtype(), weight.device());  // (N, 1)
  Tensor part = ops::mul(ops::embedding(weight, lid), mask);                         // (N, C), rows of other ranks zero
  if (any_pad) {  // + the padding rows' values, outside the autograd graph: x·0 + x·1 = x, bit for bit
    Tensor at = Tensor::from_vector(pad, {N, 1}, weight.dtype(), weight.device());  // (N, 1)
    part = ops::add(part, ops::mul(ops::embedding(weight.detach(), lid), at));       // (N, C)
  }
  Shape oshape = ids.shape();
  oshape.push_back(C);
  return part.view(oshape);  // (..., C)
}

// ---- vocab-parallel cross-entropy -------------------------------------------------------------

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const TpGroup& tp, int64_t vocab,
                                    int64_t ignore_index) {
  const char* name = "vocab_parallel_cross_entropy";
  ST_CHECK(logits.defined() && is_floating(logits.dtype()) && logits.dim() >= 1, DTypeError,
           name << ": logits must be a floating (..., V/tp) tensor, got "
                << (logits.defined() ? logits.describe() : std::string("undefined")));
  Shape expect(logits.shape().begin(), logits.shape().end() - 1);
  ST_CHECK(targets.defined() && targets.shape() == expect, ShapeError,
           name << ": targets " << (targets.defined() ? targets.describe() : std::string("undefined"))
                << " must have the logits' shape " << shape_str(logits.shape()) << " without the last dim");
  const int p = tp_size(tp), r = tp_rank(tp);
  const int64_t Vl = logits.size(-1), N = logits.numel() / std::max<int64_t>(Vl, 1);
  ST_CHECK(Vl >= 1 && vocab >= 1 && vocab <= Vl * p, ShapeError,
           name << ": vocab " << vocab << " does not fit " << p << " shards of " << Vl << " columns");
  const int64_t start = r * Vl, nvalid = std::clamp<int64_t>(vocab - start, 0, Vl);
  const Device dev = logits.device();

  std::vector<int64_t> tgt = host_ids(targets, name);
  int64_t counted = 0;
  for (int64_t n = 0; n < N; ++n) {  // every rank sees the same targets: all throw, before any collective
    const int64_t t = tgt[static_cast<size_t>(n)];
    if (t == ignore_index) continue;
    ST_CHECK(t >= 0 && t < vocab, ValueError,
             name << ": target " << t << " at position " << n << " is outside [0, V = " << vocab
                  << ") and is not ignore_index " << ignore_index);
    ++counted;
  }
  Tensor x = logits.detach().to(Device::cpu).to(DType::f32).contiguous();  // (N, Vl) host f32
  const float* px = x.data<float>();

  // 1. row max over the valid columns of every rank
  std::vector<float> mx(static_cast<size_t>(N), -std::numeric_limits<float>::infinity());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < nvalid; ++c) mx[n] = std::max(mx[n], px[n * Vl + c]);
  Tensor gmax = Tensor::from_vector(mx, {N}, DType::f32, dev);  // (N)
  if (p > 1) gmax = tp_all_reduce_max(gmax, *tp);
  mx = gmax.to_float();
  // 2. Σ exp(x − max) and the target logit (only its owner contributes), one all-reduce
  std::vector<float> st(static_cast<size_t>(2 * N), 0.f);  // [sumexp (N) | target logit (N)]
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t c = 0; c < nvalid; ++c) s += ops::cpu::exp_f32(px[n * Vl + c] - mx[n]);
    st[n] = static_cast<float>(s);
    const int64_t t = tgt[static_cast<size_t>(n)] - start;
    if (tgt[static_cast<size_t>(n)] != ignore_index && t >= 0 && t < nvalid) st[N + n] = px[n * Vl + t];
  }
  Tensor gst = Tensor::from_vector(st, {2 * N}, DType::f32, dev);  // (2N)
  if (p > 1) gst = tp_all_reduce_sum(gst, *tp);
  st = gst.to_float();
  // 3. loss = Σ_counted (log Σexp − (x_t − max)) / count, the same on every rank
  std::vector<float> lse(static_cast<size_t>(N));  // (N) log-sum-exp
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double ls = ops::cpu::log_f64(static_cast<double>(st[n]));
    lse[n] = mx[n] + static_cast<float>(ls);
    if (tgt[static_cast<size_t>(n)] != ignore_index) total += ls - static_cast<double>(st[N + n] - mx[n]);
  }
  Tensor loss = Tensor::from_vector(std::vector<float>{static_cast<float>(total / static_cast<double>(counted))}, {},
                                    DType::f32, dev);  // ()
  // backward: dloss () → dlogits (..., Vl) = (softmax − onehot)·dloss/count on valid columns, fresh
  auto saved = std::make_shared<VocabCeSaved>(
      VocabCeSaved{x, std::move(lse), std::move(tgt), counted, N, Vl, start, nvalid, ignore_index});
  attach_grad_fn(loss, name, {logits}, [saved, dev, dt = logits.dtype(), shape = logits.shape()](const Tensor& g) {
    const double dloss = g.detach().to(Device::cpu).item();
    return std::vector<Tensor>{vocab_ce_grad(*saved, dloss).to(dt).to(dev).view(shape)};
  });
  return loss;
}

}  // namespace st::runtime
