// Sharding by name without ranks: the c_attn q/k/v layout and a row split in closed form, vocab
// padding, exact shard → unshard round trips of every GPT parameter and optimizer state for tp
// 1…4, the TP share of Σ g², named errors, and a window
// of a rank's part read alone from a file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/gpt.h"
#include "ops/cross_entropy.h"
#include "ops/optim.h"
#include "runtime/optim/optimizer.h"
#include "runtime/io/safetensors.h"
#include "runtime/parallel/state_io.h"
#include "runtime/parallel/tp_shard.h"
#include "tensor/autograd.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::models::gpt_tp_shard_rule;
using st::tptest::exactly_equal;

namespace {

// t[i, j] = 100·i + j
Tensor index_matrix(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(static_cast<float>(100 * i + j));
  return Tensor::from_vector(v, {rows, cols});
}

}  // namespace

TEST(TpShard, CAttnTakesEachRanksQkvColumns) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  const ShardSpec s = rule("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(s, ShardSpec::split(-1, 3));
  Tensor w = index_matrix(4, 12);  // C = 4: q = cols 0..3, k = 4..7, v = 8..11
  const std::vector<std::vector<int64_t>> cols{{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}};
  for (int r = 0; r < 2; ++r) {
    Tensor sh = shard_tensor(w, s, 2, r);
    ASSERT_EQ(sh.shape(), (Shape{4, 6}));
    std::vector<double> v = sh.to_double();
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(v[i * 6 + j], 100.0 * i + cols[r][j]) << "rank " << r;
  }
  // bias (3C): the same columns
  Tensor b = Tensor::arange(12, DType::f32);
  EXPECT_TRUE(exactly_equal(shard_tensor(b, rule("transformer.h.3.attn.c_attn.bias"), 2, 1),
                            Tensor::from_vector(std::vector<float>{2, 3, 6, 7, 10, 11}, {6})));
}

TEST(TpShard, RowParallelWeightsSplitRowsAndTheirBiasesReplicate) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  Tensor w = index_matrix(6, 2);
  Tensor sh = shard_tensor(w, rule("transformer.h.1.mlp.c_proj.weight"), 3, 2);  // rows 4, 5
  EXPECT_TRUE(exactly_equal(sh, Tensor::from_vector(std::vector<float>{400, 401, 500, 501}, {2, 2})));
  EXPECT_EQ(rule("transformer.h.1.attn.c_proj.weight"), ShardSpec::split(0));
  EXPECT_EQ(rule("transformer.h.1.attn.c_proj.bias").kind, ShardSpec::Kind::replicated);
  EXPECT_EQ(rule("transformer.h.1.mlp.c_proj.bias").kind, ShardSpec::Kind::replicated);
  EXPECT_EQ(rule("transformer.h.0.mlp.c_fc.weight"), ShardSpec::split(-1));
  EXPECT_EQ(rule("transformer.h.0.mlp.c_fc.bias"), ShardSpec::split(0));
  for (const char* n : {"transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.ln_2.bias",
                        "transformer.ln_f.weight", "transformer.ln_f.bias"})
    EXPECT_EQ(rule(n).kind, ShardSpec::Kind::replicated) << n;
}

TEST(TpShard, VocabRowsArePaddedToAMultipleOfTp) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  const ShardSpec s = rule("transformer.wte.weight");
  Tensor w = index_matrix(10, 3);
  EXPECT_EQ(shard_shape(w.shape(), s, 3), (Shape{4, 3}));  // Vp = 12
  Tensor last = shard_tensor(w, s, 3, 2);                  // rows 8, 9, then two zero rows
  EXPECT_TRUE(exactly_equal(
      last, Tensor::from_vector(std::vector<float>{800, 801, 802, 900, 901, 902, 0, 0, 0, 0, 0, 0}, {4, 3})));
  std::vector<Tensor> shards;
  for (int r = 0; r < 3; ++r) shards.push_back(shard_tensor(w, s, 3, r));
  EXPECT_TRUE(exactly_equal(unshard_tensor(shards, s), w));
}

TEST(TpShard, EveryGptParameterRoundTripsExactlyForTp1To4) {
  models::GptConfig c;
  c.n_layer = 2;
  c.n_embd = 12;
  c.n_head = 6;
  c.vocab_size = 10;
  c.n_positions = 8;
  auto gen = std::make_shared<Generator>(7);
  models::Gpt m(c, gen);
  m.init_weights(2);
  const ShardRule rule = gpt_tp_shard_rule(c.vocab_size);
  const NamedTensors full = m.state_dict();
  ASSERT_EQ(full.size(), 4u + 12u * 2u);
  for (int tp = 1; tp <= 4; ++tp) {
    std::vector<NamedTensors> per_rank;
    for (int r = 0; r < tp; ++r) per_rank.push_back(shard_state_dict(full, rule, tp, r));
    for (size_t i = 0; i < full.size(); ++i) {
      const auto& [name, t] = full[i];
      std::vector<Tensor> shards;
      int64_t local_numel = 0;
      for (int r = 0; r < tp; ++r) {
        ASSERT_EQ(per_rank[r][i].first, name);
        ASSERT_EQ(per_rank[r][i].second.shape(), shard_shape(t.shape(), rule(name), tp)) << name;
        shards.push_back(per_rank[r][i].second);
        local_numel += per_rank[r][i].second.numel();
      }
      EXPECT_TRUE(exactly_equal(unshard_tensor(shards, rule(name)), t)) << name << " tp " << tp;
      if (rule(name).kind == ShardSpec::Kind::split && !rule(name).pad_to_tp) {
        EXPECT_EQ(local_numel, t.numel()) << name;  // a partition: nothing duplicated or lost
      }
    }
  }
}

TEST(TpShard, LocalSumSquaresCountReplicatedTensorsOnce) {
  models::GptConfig c;
  c.n_layer = 1;
  c.n_embd = 12;
  c.n_head = 6;
  c.vocab_size = 10;
  c.n_positions = 8;
  auto gen = std::make_shared<Generator>(3);
  models::Gpt m(c, gen);
  m.init_weights(2);
  NamedTensors full = m.state_dict();  // stands in for gradients: any tensors by name
  {
    NoGradGuard ng;
    for (auto& [n, t] : full) t = t.clone().add_(Tensor::full(t.shape(), 0.5));  // no zero tensors (LN biases)
  }
  double want = 0;
  for (auto& [n, t] : full) want += ops::sum_squares(t);
  const ShardRule rule = gpt_tp_shard_rule(c.vocab_size);
  for (int tp = 1; tp <= 4; ++tp) {
    double got = 0;
    for (int r = 0; r < tp; ++r) got += tp_local_sum_squares(shard_state_dict(full, rule, tp, r), rule, r);
    EXPECT_NEAR(got, want, 1e-12 * want) << "tp " << tp;  // wte padding rows are zero
  }
}

TEST(TpShard, OptimizerStateShardsLikeItsParameters) {
  models::GptConfig c;
  c.n_layer = 1;
  c.n_embd = 12;
  c.n_head = 6;
  c.vocab_size = 10;
  c.n_positions = 8;
  auto gen = std::make_shared<Generator>(4);
  models::Gpt m(c, gen);
  m.init_weights(2);
  AdamW opt(m.named_parameters(), AdamWOptions{}, DType::bf16);  // bf16: master.* keys too
  std::vector<Tensor> grads;
  for (auto& [n, p] : opt.params()) grads.push_back(tptest::randn(p.shape(), 1000 + grads.size()));
  opt.step(grads, 1e-3);  // non-zero moments
  const NamedTensors sd = opt.state_dict();
  ASSERT_EQ(sd.size(), 1 + 3 * opt.size());  // step, exp_avg.*, exp_avg_sq.*, master.*
  const ShardRule prule = gpt_tp_shard_rule(c.vocab_size), rule = optimizer_state_shard_rule(prule);
  EXPECT_EQ(rule("step").kind, ShardSpec::Kind::replicated);
  EXPECT_EQ(rule("exp_avg.transformer.h.0.attn.c_attn.weight"), ShardSpec::split(-1, 3));
  EXPECT_EQ(rule("master.transformer.wte.weight"), prule("transformer.wte.weight"));
  EXPECT_THROW(rule("velocity.transformer.wte.weight"), ValueError);
  for (int tp = 2; tp <= 3; ++tp) {
    std::vector<NamedTensors> per_rank;
    for (int r = 0; r < tp; ++r) per_rank.push_back(shard_state_dict(sd, rule, tp, r));
    for (size_t i = 0; i < sd.size(); ++i) {
      std::vector<Tensor> shards;
      for (int r = 0; r < tp; ++r) shards.push_back(per_rank[r][i].second);
      EXPECT_TRUE(exactly_equal(unshard_tensor(shards, rule(sd[i].first)), sd[i].second)) << sd[i].first;
    }
  }
}

TEST(TpShard, NamedErrors) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  EXPECT_THROW(rule("lm_head.weight"), ValueError);
  EXPECT_THROW(rule("transformer.h.0.attn.bias"), ValueError);
  EXPECT_THROW(shard_tensor(Tensor::zeros({4, 10}), ShardSpec::split(-1), 3, 0), ShapeError);
  EXPECT_THROW(shard_tensor(Tensor::zeros({4, 12}), ShardSpec::split(-1, 3), 8, 0), ShapeError);
  EXPECT_THROW(shard_tensor(Tensor::zeros({4, 12}), ShardSpec::split(-1), 2, 2), ValueError);
}

// ShardSlice (positions) and shard_tensor (copies) are two statements of one rule: the elements
// an ElementMap of the slice names are exactly the shard's, padding included, for every GPT spec.
TEST(TpShard, ShardSlicesNameTheShardsElements) {
  const ShardRule rule = gpt_tp_shard_rule(10);
  const std::vector<std::pair<std::string, Shape>> cases{{"transformer.wte.weight", {10, 4}},
                                                         {"transformer.h.0.attn.c_attn.weight", {4, 12}},
                                                         {"transformer.h.0.attn.c_attn.bias", {12}},
                                                         {"transformer.h.0.mlp.c_proj.weight", {16, 4}},
                                                         {"transformer.h.0.mlp.c_fc.weight", {4, 16}},
                                                         {"transformer.ln_f.weight", {4}}};
  for (auto& [name, full_shape] : cases)
    for (int tp : {1, 2, 4}) {
      const int64_t n = shape_numel(full_shape);
      std::vector<float> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = static_cast<float>(i + 1);  // 1-based: 0 = padding
      Tensor full = Tensor::from_vector(idx, full_shape);
      for (int r = 0; r < tp; ++r) {
        Tensor sh = shard_tensor(full, rule(name), tp, r);
        const ShardSlice slice = shard_slice(rule(name), full_shape, tp, r);
        const ElementMap m = element_map(slice, full_shape);
        ASSERT_EQ(m.numel(), sh.numel()) << name << " tp " << tp;
        auto v = sh.to_double();
        for (int64_t i = 0; i < sh.numel(); ++i) {
          const int64_t j = m.full_index(i);
          ASSERT_EQ(v[static_cast<size_t>(i)], j < 0 ? 0.0 : static_cast<double>(j + 1)) << name << " tp " << tp << " rank " << r << " elem " << i;
        }
      }
    }
  EXPECT_THROW(shard_slice(ShardSpec::split(0), {6, 2}, 4, 0), ShapeError);
}

// A window of a rank's part read alone (what a ZeRO-3 rank reads of its tp shard:
// runtime/parallel/state_io.h, read_part_window) is that part's flattened elements [first,
// first + count), bit for bit, padding zero, and only the checksum chunks holding the window's
// real elements are read: c_attn's q/k/v column chunks, a row-split weight, wte's rows padded (V 65
// over tp 2 and 3), a replicated bias; every window start and length on a grid, tp 1, 2 and 3.
TEST(TpShard, AWindowOfAPartReadsOnlyItsElements) {
  const int64_t C = 6, V = 65;
  const std::string dir = ::testing::TempDir() + "/st_window_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  NamedTensors full{{"transformer.h.0.attn.c_attn.weight", index_matrix(C, 3 * C)},
                    {"transformer.h.0.mlp.c_proj.weight", index_matrix(4 * C, C)},
                    {"transformer.wte.weight", index_matrix(V, C)},
                    {"transformer.h.0.mlp.c_proj.bias", index_matrix(1, C).flatten()}};
  save_safetensors(dir + "/model.safetensors", full, {{"format", "pt"}});
  const SafetensorsStore store(dir, "model");
  for (int tp : {1, 2, 3})
    for (int r = 0; r < tp; ++r) {
      PartSource src;
      src.store = &store;
      src.rule = gpt_tp_shard_rule(V);
      src.tp = tp;
      src.rank = r;
      for (const auto& [name, t] : full) {
        const Shape local = shard_shape(t.shape(), src.rule(name), tp);
        const Tensor part = read_part(src, name, local).flatten();  // (n,), padding zero
        const int64_t n = part.numel();
        for (int64_t first = 0; first < n; first += std::max<int64_t>(1, n / 7))
          for (int64_t count : {int64_t{0}, int64_t{1}, n / 3, n - first}) {
            if (first + count > n) continue;
            const uint64_t before = safetensors_bytes_read();
            const Tensor w = read_part_window(src, name, local, first, count);
            const uint64_t bytes = safetensors_bytes_read() - before;
            const std::string what = name + " tp " + std::to_string(tp) + " rank " + std::to_string(r) + " [" +
                                     std::to_string(first) + ", +" + std::to_string(count) + ")";
            ASSERT_EQ(w.numel(), count) << what;
            EXPECT_TRUE(exactly_equal(w, part.narrow(0, first, count).contiguous())) << what;
            int64_t held = 0;  // real elements inside the window
            for (int64_t i = first; i < first + count; ++i)
              held += name != "transformer.wte.weight" || i / C + r * local[0] < V;
            // the file carries checksums of 64 KiB chunks (runtime/io/safetensors.h), and a read
            // takes every chunk it touches whole, to check it: each tensor here is one chunk
            // (≤ 1.6 KiB), so a window with a real element reads its tensor, one without reads nothing
            EXPECT_EQ(bytes, held > 0 ? 4u * static_cast<uint64_t>(t.numel()) : 0u) << what;
          }
      }
    }
  std::filesystem::remove_all(dir);
}
