// The tensor-parallel GPT against the single-process GPT on the same weights, under mpirun:
// tp = the world where 6 heads divide by it (np 1, 2, 3), tp-2 groups of a dp 2 × tp 2 grid at
// np 4. 2 layers, 6 heads, V = 50 (padded for tp 3 and 4). Checked to 1e-5 relative: the full
// logits, the loss, and every parameter's gradient gathered to the full tensor by name — with
// dropout off and on (dropout draws the same masks as the single-process model). Initialisation
// and full_state_dict / load_full_state_dict are checked exactly.
#include <gtest/gtest.h>

#include "comm/process_grid.h"
#include "models/gpt.h"
#include "ops/cross_entropy.h"
#include "runtime/optim/grad_clip.h"
#include "runtime/parallel/tp_shard.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::tptest::close_rel;
using st::tptest::exactly_equal;

namespace {

constexpr double kRtol = 1e-5;

TpGroup tp_group() {
  static TpGroup g = [] {
    auto w = tptest::world();
    if (6 % w->size() == 0) return w;
    static comm::ProcessGrid grid(w, 0, 2, 1);  // np 4: dp 2 × tp 2
    return grid.tp_group();
  }();
  return g;
}

models::GptConfig config(double pdrop) {
  models::GptConfig c;
  c.n_layer = 2;
  c.n_embd = 24;
  c.n_head = 6;
  c.vocab_size = 50;
  c.n_positions = 16;
  c.embd_pdrop = c.resid_pdrop = pdrop;
  return c;
}

// ids (B, T) in [0, V), the same on every rank
Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t salt) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(static_cast<int64_t>((i * 37 + salt * 11 + (i * i) % 7) % V));
  return Tensor::from_vector(v, {B, T});
}

std::map<std::string, Tensor> as_map(const NamedTensors& n) { return {n.begin(), n.end()}; }

void compare_with_single_process(double pdrop) {
  const models::GptConfig c = config(pdrop);
  auto gen_full = std::make_shared<Generator>(99), gen_tp = std::make_shared<Generator>(99);
  models::Gpt full(c, gen_full);
  models::Gpt tpm(c, gen_tp, {}, tp_group());
  {
    full.init_weights(123);
    tpm.init_weights(123);
  }
  const NamedTensors ref_sd = full.state_dict();
  {  // init = Gpt's init sharded: gathering gives Gpt's tensors, names and order, exactly
    NamedTensors got = tpm.full_state_dict();
    ASSERT_EQ(got.size(), ref_sd.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, ref_sd[i].first);
      EXPECT_TRUE(exactly_equal(got[i].second, ref_sd[i].second)) << got[i].first;
    }
  }
  const Tensor ids = tokens(2, 8, c.vocab_size, 1), targets = tokens(2, 8, c.vocab_size, 2);
  full.train(pdrop > 0);
  tpm.train(pdrop > 0);
  Tensor logits_r = full.forward(ids);  // (B, T, V)
  Tensor loss_r = ops::cross_entropy(logits_r, targets);
  loss_r.backward();

  Tensor local = tpm.forward(ids);  // (B, T, Vp/tp)
  const int p = tp_size(tp_group());
  ASSERT_EQ(local.shape(), (Shape{2, 8, pad_vocab(c.vocab_size, p) / p}));
  EXPECT_TRUE(close_rel(tpm.gather_logits(local), logits_r, kRtol));
  Tensor loss = tpm.loss(local, targets);
  EXPECT_TRUE(close_rel(loss, loss_r, kRtol)) << loss.item() << " vs " << loss_r.item();
  loss.backward();

  NamedTensors grads;
  for (auto& [n, t] : tpm.named_parameters()) {
    ASSERT_TRUE(t.grad().defined()) << n;
    grads.emplace_back(n, t.grad());
  }
  NamedTensors full_grads = gather_state_dict(grads, tpm.shard_rule(), *tp_group());
  std::map<std::string, Tensor> ref_params = as_map(full.named_parameters());
  for (auto& [n, g] : full_grads) EXPECT_TRUE(close_rel(g, ref_params.at(n).grad(), kRtol)) << n;
  // the global gradient norm: Σ over the tp group of each rank's share = the one-process Σ g²
  std::vector<Tensor> ref_grads;
  for (auto& [n, t] : full.named_parameters()) ref_grads.push_back(t.grad());
  Tensor share = Tensor::from_vector(
      std::vector<float>{static_cast<float>(tp_local_sum_squares(grads, tpm.shard_rule(), tp_rank(tp_group())))}, {1});
  const double norm_sq = tp_size(tp_group()) > 1 ? tp_all_reduce_sum(share, *tp_group()).item() : share.item();
  const double want_sq = local_sum_squares(ref_grads);
  EXPECT_NEAR(norm_sq, want_sq, 1e-5 * want_sq);
}

}  // namespace

TEST(TpGpt, SameLogitsLossAndGradientsAsOneProcess) { compare_with_single_process(0.0); }

TEST(TpGpt, SameWithDropout) { compare_with_single_process(0.1); }

// A pipeline stage of a tp × pp grid builds only its layers' shards, each drawing its slice of
// the full tensor's keyed stream: equal to the one-process Gpt's tensors sharded, exactly (the
// head's own wte shard, padded rows zero, included).
TEST(TpGpt, ALayerRangeHoldsItsShardsOfTheWholeModel) {
  const models::GptConfig c = config(0.0);
  auto gen = std::make_shared<Generator>(5);
  models::Gpt full(c, gen);
  full.init_weights(21);
  const ShardRule rule = models::gpt_tp_shard_rule(c.vocab_size);
  const int p = tp_size(tp_group()), r = tp_rank(tp_group());
  for (auto [b, e] : std::vector<std::pair<int, int>>{{3, 4}, {1, 3}, {0, 1}}) {
    models::Gpt part(c, gen, {{b, e}}, tp_group());
    part.init_weights(21);
    ASSERT_EQ(static_cast<int>(part.layers().size()), e - b);
    size_t n = 0;
    for (auto& [name, t] : part.named_parameters()) {
      EXPECT_TRUE(exactly_equal(t, shard_tensor(full.parameter(name), rule(name), p, r)))
          << name << " in layers [" << b << ", " << e << ")";
      ++n;
    }
    size_t want = 0;
    for (int i = b; i < e; ++i) want += full.layers()[static_cast<size_t>(i)]->full_named_parameters().size();
    EXPECT_EQ(n, want);
  }
}

TEST(TpGpt, LoadFullStateDictShardsAndFullStateDictGathers) {
  const models::GptConfig c = config(0.0);
  auto gen = std::make_shared<Generator>(5);
  models::Gpt full(c, gen);
  full.init_weights(31);
  models::Gpt a(c, gen, {}, tp_group());
  a.load_full_state_dict(as_map(full.state_dict()));
  NamedTensors back = a.full_state_dict(), ref = full.state_dict();
  ASSERT_EQ(back.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(back[i].first, ref[i].first);
    EXPECT_TRUE(exactly_equal(back[i].second, ref[i].second)) << ref[i].first;
    EXPECT_EQ(a.full_shape(ref[i].first), ref[i].second.shape());
  }
  EXPECT_EQ(a.config_json(), full.config_json());
  EXPECT_EQ(a.tied_names(), full.tied_names());
  // wrong full shape and unexpected keys are named errors
  auto bad = as_map(full.state_dict());
  bad["transformer.h.0.mlp.c_fc.weight"] = Tensor::zeros({24, 48});
  EXPECT_THROW(a.load_full_state_dict(bad), ValueError);
  auto extra = as_map(full.state_dict());
  extra["lm_head.weight"] = Tensor::zeros({50, 24});
  EXPECT_THROW(a.load_full_state_dict(extra), ValueError);
  EXPECT_NO_THROW(a.load_full_state_dict(extra, /*strict=*/false));
}

TEST(TpGpt, Bf16ParametersRunAndStayCloseToOneProcessBf16) {
  // Low-precision compute (the trainer's bf16 mode): partial sums are rounded to bf16 before the
  // all-reduce, so only closeness at bf16's precision is expected.
  const models::GptConfig c = config(0.0);
  auto gen = std::make_shared<Generator>(9);
  models::Gpt full(c, gen);
  full.init_weights(31);
  models::Gpt tpm(c, gen, {}, tp_group());
  tpm.load_full_state_dict(as_map(full.state_dict()));
  full.cast_parameters(DType::bf16);
  tpm.cast_parameters(DType::bf16);
  const Tensor ids = tokens(2, 8, c.vocab_size, 3), targets = tokens(2, 8, c.vocab_size, 4);
  Tensor logits_r = full.forward(ids);
  Tensor loss_r = ops::cross_entropy(logits_r, targets);
  loss_r.backward();
  Tensor local = tpm.forward(ids);
  EXPECT_EQ(local.dtype(), DType::bf16);
  EXPECT_TRUE(close_rel(tpm.gather_logits(local), logits_r, 3e-2));
  Tensor loss = tpm.loss(local, targets);
  EXPECT_NEAR(loss.item(), loss_r.item(), 1e-2 * loss_r.item());
  loss.backward();
  for (auto& [n, t] : tpm.named_parameters()) EXPECT_EQ(t.grad().dtype(), DType::bf16) << n;
}

TEST(TpGpt, HeadsMustDivideByTp) {
  models::GptConfig c = config(0.0);
  c.n_head = 5;
  c.n_embd = 20;
  auto gen = std::make_shared<Generator>(1);
  if (tp_size(tp_group()) == 1)
    EXPECT_NO_THROW(models::Gpt(c, gen, {}, tp_group()));
  else
    EXPECT_THROW(models::Gpt(c, gen, {}, tp_group()), ValueError);
}
