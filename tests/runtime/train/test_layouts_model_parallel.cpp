// Tensor parallel and the whole grid against one process on the same global batch
// (layouts_common.h: the property, the tolerance): tp n (a padded vocabulary), tp × pp, dp × tp
// with ZeRO-1/2, the Hugging Face fixture under pipelines and the grid, every axis at once (np 8).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;


// The Hugging Face fixture (transformers' GPT2LMHeadModel: 5 AdamW steps) under pipelines and
// the whole grid: the same losses and grad norms as reference.json, to 1e-5.
TEST(Layouts, HuggingFaceFixtureUnderEveryLayout) {
  const int n = world_size();
  const std::string fx = ST_FIXTURE_DIR;
  auto ref = nlohmann::json::parse(std::ifstream(fx + "/reference.json"));
  Curve want;
  for (auto& s : ref["steps"]) {
    want.loss.push_back(s["loss"].get<double>());
    want.grad_norm.push_back(s["grad_norm"].get<double>());
  }
  TrainConfig c;
  c.model = "gpt";
  c.init_from = fx;
  c.data = fx + "/tokens.bin";
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.vocab = 256;
  c.seq_len = 32;
  c.micro_batch = 1;
  c.grad_accum = 4;
  c.steps = 5;
  c.lr = 1e-3;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.clip = 1.0;
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  std::vector<std::tuple<int, int, int, const char*>> layouts;  // dp, tp, pp, schedule
  if (n == 2) layouts = {{1, 1, 2, "1f1b"}, {1, 1, 2, "gpipe"}, {1, 2, 1, "1f1b"}, {2, 1, 1, "1f1b"}};
  if (n == 3) layouts = {{1, 1, 3, "1f1b"}};
  if (n == 4) layouts = {{1, 1, 4, "1f1b"}, {1, 2, 2, "gpipe"}, {2, 1, 2, "1f1b"}, {1, 4, 1, "1f1b"}};
  // our one process against transformers: its distance is allowed on top of the layout's noise
  // (test_gpt_fidelity holds that distance to its own bound)
  const Curve ours = reference(c, 1);
  Curve distance;
  for (size_t i = 0; i < want.loss.size(); ++i) {
    distance.loss.push_back(rel(ours.loss[i], want.loss[i]));
    distance.grad_norm.push_back(rel(ours.grad_norm[i], want.grad_norm[i]));
  }
  want.loss_noise = ours.loss_noise;
  want.norm_noise = ours.norm_noise;
  for (auto [dp, tp, pp, sched] : layouts) {
    TrainConfig l = c;
    l.dp = dp;
    l.tp = tp;
    l.pp = pp;
    l.grad_accum = 4 / dp;
    l.schedule = parse_enum<Schedule>(sched, "schedule");
    l.partition = PartitionKind::uniform;
    expect_same(run_layout(l, "hf"), want,
                "HF fixture, dp " + std::to_string(dp) + " tp " + std::to_string(tp) + " pp " + std::to_string(pp) + " " + sched,
                0, &distance);
  }
}

TEST(Layouts, TensorParallelEqualsOneProcess) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.heads = 12;  // divisible by 2, 3 and 4
  c.d_model = 48;
  c.vocab = 62;  // not a multiple of 4 or 3: padded and masked
  c.tp = n;
  c.dp = 1;
  expect_same(run_layout(c, "tp"), reference(c, 1), "tp " + std::to_string(n));
  if (n == 4) {
    c.tp = 2;
    c.pp = 2;
    expect_same(run_layout(c, "tp2pp2"), reference(c, 1), "tp 2 × pp 2");
    c.pp = 1;
    c.dp = 2;
    expect_same(run_layout(c, "dp2tp2"), reference(c, 2), "dp 2 × tp 2");
    c.zero = 1;  // each tp rank's shards split over its dp group
    const Curve want = reference(c, 2);
    expect_same(run_layout(c, "dp2tp2zero"), want, "dp 2 × tp 2, zero 1");
    c.zero = 2;
    expect_same(run_layout(c, "dp2tp2zero2"), want, "dp 2 × tp 2, zero 2");
  }
}

// Sequence parallelism (--sequence-parallel 1) computes tp's function with the norms, residual adds
// and the embedding/head edges on T/tp positions per rank: the same curve as tp 2 without it and as
// one process, within the one-process noise (another summation order: the norm weights' gradients
// summed over two halves of T, then over tp). np 2: tp 2, and with recompute; np 4: tp 2 × pp 2
// (stage boundaries carry (B, T/tp, C); the strict-p2p twin runs it) and dp 2 × tp 2 with ZeRO-1, -3;
// np 3: tp 3 does not divide T 16, refused by validate() before any rank starts.
TEST(Layouts, SequenceParallelEqualsTensorParallel) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  c.vocab = 62;
  c.dp = 1;
  c.sequence_parallel = 1;
  if (n == 3) {
    c.tp = 3;
    std::string why;
    c.validate([&](const std::string& flag, const std::string& msg) { why += flag + ": " + msg + "; "; });
    EXPECT_NE(why.find("sequence-parallel: --seq-len 16 must divide by --tp 3"), std::string::npos) << why;
    return;
  }
  c.tp = 2;
  if (n == 2) {
    const Curve want = reference(c, 1);
    TrainConfig plain = c;
    plain.sequence_parallel = 0;
    Curve tp = run_layout(plain, "tp2_for_sp");
    expect_same(tp, want, "tp 2");
    tp.loss_noise = want.loss_noise, tp.norm_noise = want.norm_noise;  // tp's curve, one process's noise
    const Curve sp = run_layout(c, "tp2_sp");
    expect_same(sp, tp, "tp 2 sequence parallel vs tp 2");
    expect_same(sp, want, "tp 2 sequence parallel vs one process");
    c.recompute = true;
    expect_same(run_layout(c, "tp2_sp_rc"), want, "tp 2 sequence parallel, recompute");
  }
  if (n == 4) {
    c.pp = 2;
    expect_same(run_layout(c, "tp2pp2_sp"), reference(c, 1), "tp 2 × pp 2, sequence parallel");
    c.pp = 1;
    c.dp = 2;
    c.zero = 1;
    const Curve want = reference(c, 2);
    expect_same(run_layout(c, "dp2tp2zero_sp"), want, "dp 2 × tp 2, zero 1, sequence parallel");
    c.zero = 3;  // the norms' weights gathered per layer, their gradients summed over tp, then reduce-scattered over dp
    expect_same(run_layout(c, "dp2tp2zero3_sp"), want, "dp 2 × tp 2, zero 3, sequence parallel");
  }
}

// Every axis at once (8 ranks: dp 2 × tp 2 × pp 2), with ZeRO-1 and recompute, and the interleaved
// schedule with ZeRO-2: the one-process curve.
TEST(Layouts, EveryAxisAtOnce) {
  if (world_size() != 8) GTEST_SKIP() << "dp 2 × tp 2 × pp 2 needs 8 ranks (ctest: test_layouts_np8)";
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  c.vocab = 62;
  c.dp = 2;
  c.tp = 2;
  c.pp = 2;
  const Curve want = reference(c, 2);
  expect_same(run_layout(c, "dp2tp2pp2"), want, "dp 2 × tp 2 × pp 2");
  c.zero = true;
  c.recompute = true;
  expect_same(run_layout(c, "dp2tp2pp2_zero_rc"), want, "dp 2 × tp 2 × pp 2, zero 1, recompute");
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  c.zero = 2;
  expect_same(run_layout(c, "dp2tp2pp2_interleaved"), want, "dp 2 × tp 2 × pp 2, interleaved v 2, zero 2");
}
