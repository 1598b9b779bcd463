// Tensor-parallel layers under mpirun (tp group = the world): forward and the input / weight
// gradients of each parallel layer equal the single-process ops on the same full tensors, sharded
// by runtime/parallel/tp_shard.h, to 1e-5 relative (normwise); vocab-parallel embedding and cross-entropy
// with V = 10 (padded when tp does not divide it) equal ops::embedding / ops::cross_entropy;
// gather_state_dict inverts shard_state_dict exactly.
#include <gtest/gtest.h>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "runtime/parallel/tp_layers.h"
#include "models/decoder/decoder_layers.h"
#include "models/gpt.h"
#include "runtime/parallel/tp_shard.h"
#include "tensor/autograd.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::models::gpt_tp_shard_rule;
using st::tptest::close_rel;
using st::tptest::exactly_equal;
using st::tptest::leaf;
using st::tptest::dot;
using st::tptest::P;
using st::tptest::R;
using st::tptest::randn;
using st::tptest::tp;

namespace {

constexpr double kRtol = 1e-5;


void set_param(const Tensor& p, const Tensor& v) {
  NoGradGuard ng;
  p.detach().copy_(v);
}
Tensor shard(const Tensor& full, const ShardSpec& s) { return shard_tensor(full, s, P(), R()); }

// loss = Σ y·g

// The GPT's attention on full tensors: h (B, T, C) → (B, T, C).
// A GPT-2 block's description of width C and H heads (MLP 4C).
models::DecoderSpec gpt_block_spec(int64_t C, int64_t H) {
  models::GptConfig c;
  c.n_layer = 2;
  c.n_embd = C;
  c.n_head = H;
  c.vocab_size = 10;
  return models::gpt_spec(c);
}

Tensor ref_attention(const Tensor& h, const Tensor& wa, const Tensor& ba, const Tensor& wp, const Tensor& bp,
                     int64_t H) {
  const int64_t B = h.size(0), T = h.size(1), C = h.size(2), D = C / H;
  Tensor qkv = ops::linear(h, wa, ba);  // (B, T, 3C)
  auto heads = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2).contiguous(); };
  Tensor y = ops::causal_attention(heads(0), heads(1), heads(2)).transpose(1, 2).contiguous().reshape({B, T, C});
  return ops::linear(y, wp, bp);
}

}  // namespace

TEST(TpLayers, ColumnParallelLinearLocalAndGathered) {
  Tensor W = randn({16, 24}, 1), b = randn({24}, 2), X = randn({2, 3, 16}, 3), G = randn({2, 3, 24}, 4);
  Tensor xr = leaf(X), wr = leaf(W), br = leaf(b);
  Tensor yr = ops::linear(xr, wr, br);
  dot(yr, G).backward();
  for (bool gather : {false, true}) {
    ColumnParallelLinear col(16, 24, tp(), true, gather);
    ASSERT_EQ(col.weight.shape(), (Shape{16, 24 / P()}));
    set_param(col.weight, shard(W, ShardSpec::split(-1)));
    set_param(col.bias, shard(b, ShardSpec::split(0)));
    Tensor x = leaf(X);
    Tensor y = col.forward(x);
    if (gather) {
      EXPECT_TRUE(close_rel(y, yr, kRtol));
      dot(y, G).backward();
    } else {
      EXPECT_TRUE(close_rel(y, shard(yr.detach(), ShardSpec::split(-1)), kRtol));
      dot(y, shard(G, ShardSpec::split(-1))).backward();
    }
    EXPECT_TRUE(close_rel(x.grad(), xr.grad(), kRtol)) << "gather " << gather;
    EXPECT_TRUE(close_rel(col.weight.grad(), shard(wr.grad(), ShardSpec::split(-1)), kRtol));
    EXPECT_TRUE(close_rel(col.bias.grad(), shard(br.grad(), ShardSpec::split(0)), kRtol));
  }
}

TEST(TpLayers, RowParallelLinearSplitAndFullInput) {
  Tensor W = randn({24, 16}, 5), b = randn({16}, 6), X = randn({2, 3, 24}, 7), G = randn({2, 3, 16}, 8);
  Tensor xr = leaf(X), wr = leaf(W), br = leaf(b);
  Tensor yr = ops::linear(xr, wr, br);
  dot(yr, G).backward();
  for (bool parallel_in : {true, false}) {
    RowParallelLinear row(24, 16, tp(), true, parallel_in);
    ASSERT_EQ(row.weight.shape(), (Shape{24 / P(), 16}));
    set_param(row.weight, shard(W, ShardSpec::split(0)));
    set_param(row.bias, b);
    Tensor x = leaf(parallel_in ? shard(X, ShardSpec::split(-1)) : X);
    Tensor y = row.forward(x);
    EXPECT_TRUE(close_rel(y, yr, kRtol));
    dot(y, G).backward();
    Tensor want_dx = parallel_in ? shard(xr.grad(), ShardSpec::split(-1)) : xr.grad();
    EXPECT_TRUE(close_rel(x.grad(), want_dx, kRtol)) << "input_is_parallel " << parallel_in;
    EXPECT_TRUE(close_rel(row.weight.grad(), shard(wr.grad(), ShardSpec::split(0)), kRtol));
    EXPECT_TRUE(close_rel(row.bias.grad(), br.grad(), kRtol));  // replicated: the full gradient
  }
}

TEST(TpLayers, AttentionSplitByHeads) {
  const int64_t C = 48, H = 12;  // 12 heads divide by tp 1…4
  const ShardRule rule = gpt_tp_shard_rule(10);
  Tensor Wa = randn({C, 3 * C}, 11, 0.2f), ba = randn({3 * C}, 12, 0.2f), Wp = randn({C, C}, 13, 0.2f),
         bp = randn({C}, 14, 0.2f), Hin = randn({2, 5, C}, 15), G = randn({2, 5, C}, 16);
  Tensor h_r = leaf(Hin), wa_r = leaf(Wa), ba_r = leaf(ba), wp_r = leaf(Wp), bp_r = leaf(bp);
  Tensor yr = ref_attention(h_r, wa_r, ba_r, wp_r, bp_r, H);
  dot(yr, G).backward();

  // the GPT-2 decoder block's attention (models/decoder/decoder_layers.h), its plan's split
  models::DecoderBlock blk(gpt_block_spec(C, H), tp(), std::make_shared<Generator>(0), 1);
  EXPECT_EQ(blk.local_heads(), H / P());
  NamedTensors params;
  for (auto& [n, t] : blk.named_parameters("transformer.h.0"))
    if (n.find(".attn.") != std::string::npos) params.emplace_back(n, t);
  ASSERT_EQ(params.size(), 4u);
  const std::vector<Tensor> full{Wa, ba, Wp, bp}, full_grad{wa_r.grad(), ba_r.grad(), wp_r.grad(), bp_r.grad()};
  for (size_t i = 0; i < 4; ++i) set_param(params[i].second, shard(full[i], rule(params[i].first)));
  Tensor h = leaf(Hin);
  Tensor y = blk.attention(h);
  EXPECT_TRUE(close_rel(y, yr, kRtol));
  dot(y, G).backward();
  EXPECT_TRUE(close_rel(h.grad(), h_r.grad(), kRtol));
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(close_rel(params[i].second.grad(), shard(full_grad[i], rule(params[i].first)), kRtol))
        << params[i].first;
}

TEST(TpLayers, MlpSplitByTheHiddenDim) {
  const int64_t C = 12, F = 4 * C;  // 48 divides by tp 1…4
  const ShardRule rule = gpt_tp_shard_rule(10);
  Tensor Wf = randn({C, F}, 21, 0.3f), bf = randn({F}, 22, 0.3f), Wp = randn({F, C}, 23, 0.3f),
         bp = randn({C}, 24, 0.3f), Hin = randn({2, 5, C}, 25), G = randn({2, 5, C}, 26);
  Tensor h_r = leaf(Hin), wf_r = leaf(Wf), bf_r = leaf(bf), wp_r = leaf(Wp), bp_r = leaf(bp);
  Tensor yr = ops::linear(ops::gelu(ops::linear(h_r, wf_r, bf_r)), wp_r, bp_r);
  dot(yr, G).backward();

  models::DecoderBlock blk(gpt_block_spec(C, 12), tp(), std::make_shared<Generator>(0), 2);  // 12 heads: any tp 1…4
  NamedTensors params;
  for (auto& [n, t] : blk.named_parameters("transformer.h.1"))
    if (n.find(".mlp.") != std::string::npos) params.emplace_back(n, t);
  ASSERT_EQ(params.size(), 4u);
  const std::vector<Tensor> full{Wf, bf, Wp, bp}, full_grad{wf_r.grad(), bf_r.grad(), wp_r.grad(), bp_r.grad()};
  for (size_t i = 0; i < 4; ++i) set_param(params[i].second, shard(full[i], rule(params[i].first)));
  Tensor h = leaf(Hin);
  Tensor y = blk.mlp(h);
  EXPECT_TRUE(close_rel(y, yr, kRtol));
  dot(y, G).backward();
  EXPECT_TRUE(close_rel(h.grad(), h_r.grad(), kRtol));
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(close_rel(params[i].second.grad(), shard(full_grad[i], rule(params[i].first)), kRtol))
        << params[i].first;
}

TEST(TpLayers, VocabParallelEmbeddingWithPaddedVocab) {
  const int64_t V = 10, C = 6;
  Tensor W = randn({V, C}, 31), G = randn({2, 6, C}, 32);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 9, 0, 9, 5, 1, 8, 2, 7, 4, 6, 9}, {2, 6});
  Tensor wr = leaf(W);
  Tensor yr = ops::embedding(wr, ids);
  dot(yr, G).backward();

  VocabParallelEmbedding emb(V, C, tp());
  EXPECT_EQ(emb.padded_vocab, pad_vocab(V, P()));
  EXPECT_EQ(emb.padded_vocab % P(), 0);
  set_param(emb.weight, shard(W, ShardSpec::split_padded(0, V)));
  Tensor y = emb.forward(ids);
  EXPECT_TRUE(close_rel(y, yr, kRtol));
  dot(y, G).backward();
  EXPECT_TRUE(close_rel(emb.weight.grad(), shard(wr.grad(), ShardSpec::split_padded(0, V)), kRtol));
  // i32 ids give the same rows; an id outside [0, V) is an error on every rank
  Tensor ids32 = Tensor::from_vector(std::vector<int32_t>{3, 9, 0, 9, 5, 1, 8, 2, 7, 4, 6, 9}, {2, 6});
  EXPECT_TRUE(close_rel(emb.forward(ids32), yr, kRtol));
  EXPECT_THROW(emb.forward(Tensor::from_vector(std::vector<int64_t>{1, 10}, {1, 2})), ValueError);
}

// HF's padding_idx (Llama's pad_token_id) under the vocabulary split: the rank holding the row
// gives its values (the output is the plain lookup's, bit for bit) and no gradient — that row of
// the gradient exactly 0, every other row the plain lookup's. Pad 9 (the last rank's rows, three
// times in the ids) and pad 0 (the first rank's).
TEST(TpLayers, VocabParallelEmbeddingPaddingRowGetsNoGradient) {
  const int64_t V = 10, C = 6;
  Tensor W = randn({V, C}, 31), G = randn({2, 6, C}, 32);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 9, 0, 9, 5, 1, 8, 2, 7, 4, 6, 9}, {2, 6});
  Tensor wr = leaf(W);
  Tensor yr = ops::embedding(wr, ids);
  dot(yr, G).backward();
  for (int64_t pad : {int64_t{9}, int64_t{0}}) {
    VocabParallelEmbedding emb(V, C, tp());
    emb.padding_idx = pad;
    set_param(emb.weight, shard(W, ShardSpec::split_padded(0, V)));
    Tensor y = emb.forward(ids);
    EXPECT_TRUE(exactly_equal(y, yr)) << "pad " << pad;
    dot(y, G).backward();
    Tensor want = wr.grad().clone();
    want.narrow(0, pad, 1).fill_(0.0);  // the row HF's padding_idx keeps out of the gradient
    const Tensor got = emb.weight.grad();
    EXPECT_TRUE(exactly_equal(got, shard(want, ShardSpec::split_padded(0, V)))) << "pad " << pad;
  }
}

TEST(TpLayers, VocabParallelCrossEntropyMasksPaddingAndMatchesTheFullLoss) {
  const int64_t V = 10;
  Tensor L = ops::scale(randn({2, 5, V}, 41), 3.0).detach();
  {  // one row far from zero: the max must be taken across ranks
    NoGradGuard ng;
    L.narrow(0, 0, 1).narrow(1, 0, 1).add_(Tensor::full({1, 1, V}, 1000.0));
  }
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{9, 0, -100, 4, 5, 9, 1, 2, 8, 3}, {2, 5});
  Tensor lr = leaf(L);
  Tensor loss_r = ops::cross_entropy(lr, targets);
  ops::scale(loss_r, 2.5).backward();

  const ShardSpec s = ShardSpec::split_padded(-1, V);
  Tensor local = shard(L, s);  // (2, 5, Vp/tp); padded columns hold 0 …
  const int64_t Vl = local.size(-1);
  {  // … set them to 50 instead: they must still count as −inf
    NoGradGuard ng;
    for (int64_t c = 0; c < Vl; ++c)
      if (R() * Vl + c >= V) local.narrow(2, c, 1).fill_(50.0);
  }
  Tensor x = leaf(local);
  Tensor loss = vocab_parallel_cross_entropy(x, targets, tp(), V);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_TRUE(close_rel(loss, loss_r, kRtol)) << loss.item() << " vs " << loss_r.item();
  ops::scale(loss, 2.5).backward();
  EXPECT_TRUE(close_rel(x.grad(), shard(lr.grad(), s), kRtol));  // padded columns: gradient 0

  // i32 targets: the same loss; a target outside [0, V) throws on every rank, before any collective
  Tensor t32 = Tensor::from_vector(std::vector<int32_t>{9, 0, -100, 4, 5, 9, 1, 2, 8, 3}, {2, 5});
  EXPECT_TRUE(close_rel(vocab_parallel_cross_entropy(local, t32, tp(), V), loss_r, kRtol));
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{9, 0, 10, 4, 5, 9, 1, 2, 8, 3}, {2, 5});
  EXPECT_THROW(vocab_parallel_cross_entropy(local, bad, tp(), V), ValueError);
  // every target ignored: 0/0 = NaN, as ops::cross_entropy
  Tensor none = Tensor::full({2, 5}, -100.0, DType::f32).to(DType::i64);
  EXPECT_TRUE(std::isnan(vocab_parallel_cross_entropy(local, none, tp(), V).item()));
}

TEST(TpLayers, GatherStateDictInvertsShardStateDictExactly) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  NamedTensors full{{"transformer.wte.weight", randn({10, 12}, 51)},
                    {"transformer.wpe.weight", randn({8, 12}, 52)},
                    {"transformer.h.0.ln_1.weight", randn({12}, 53)},
                    {"transformer.h.0.attn.c_attn.weight", randn({12, 36}, 54)},
                    {"transformer.h.0.attn.c_attn.bias", randn({36}, 55)},
                    {"transformer.h.0.attn.c_proj.weight", randn({12, 12}, 56)},
                    {"transformer.h.0.attn.c_proj.bias", randn({12}, 57)},
                    {"transformer.h.0.mlp.c_fc.weight", randn({12, 48}, 58)},
                    {"transformer.h.0.mlp.c_fc.bias", randn({48}, 59)},
                    {"transformer.h.0.mlp.c_proj.weight", randn({48, 12}, 60)}};
  NamedTensors local = shard_state_dict(full, rule, P(), R());
  NamedTensors back = gather_state_dict(local, rule, *tp());
  ASSERT_EQ(back.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(back[i].first, full[i].first);
    EXPECT_TRUE(exactly_equal(back[i].second, full[i].second)) << full[i].first;
  }
}
