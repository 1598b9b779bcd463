// Data parallel and ZeRO-1/2 against one process on the same global batch (layouts_common.h: the
// property, the tolerance): dp n with and without accumulation, ZeRO-1 and -2 (with pp 2, small
// buckets, bf16 gradient communication, bf16), bf16 gradient communication within 1 %; fp8 under
// dp and ZeRO-1, ZeRO-3, recompute, pp 2 and tp 2 (the FP8 overflow / underflow counts too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;


TEST(Layouts, DataParallelEqualsOneProcess) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.dp = n;
  Curve want = reference(c, n);
  expect_same(run_layout(c, "dp"), want, "dp " + std::to_string(n));
  // the loss falls: the layouts are compared on a run that learns
  EXPECT_LT(want.loss.back(), want.loss.front());
}

TEST(Layouts, DataParallelWithoutAccumulation) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.dp = n;
  c.grad_accum = 1;
  c.micro_batch = 3;
  expect_same(run_layout(c, "dp_noaccum"), reference(c, n), "dp, K=1");
}

// ZeRO-1 and ZeRO-2 (the same function; ZeRO-2 frees the other owners' gradient buckets once
// reduced): dp n, with pp 2 (strict p2p in the P2P_STRICT twin), with accumulation (K = 2 in
// base_config), small buckets, bf16 gradient communication, bf16.
TEST(Layouts, ZeroEqualsOneProcess) {
  const int n = world_size();
  for (int64_t stage : {1, 2}) {
    const std::string z = "zero " + std::to_string(stage), tag = "zero" + std::to_string(stage);
    TrainConfig c = base_config();
    c.dp = n;
    c.zero = stage;
    Curve want = reference(c, n);
    expect_same(run_layout(c, tag), want, "dp " + std::to_string(n) + " " + z);
    if (n % 2 == 0 && n > 2) {
      c.dp = n / 2;
      c.pp = 2;
      expect_same(run_layout(c, tag + "_pp2"), reference(c, n / 2), z + " with pp 2");
    }
    // small buckets (10 KiB of a ~0.2 MB model: many per owner, launched during backward)
    c = base_config();
    c.dp = n;
    c.zero = stage;
    c.bucket_mb = 0.01;
    testing::internal::CaptureStdout();
    Curve small = run_layout(c, tag + "_buckets");
    const std::string log = testing::internal::GetCapturedStdout();
    expect_same(small, want, "dp " + std::to_string(n) + " " + z + ", --bucket-mb 0.01");
    if (n > 1 && world_rank() == 0) {  // the run summary: "zero N: B buckets per step (...)"
      const size_t at = log.find(z + ": ");
      ASSERT_NE(at, std::string::npos) << log;
      EXPECT_GE(std::stoi(log.substr(at + 8)), 10) << "--bucket-mb 0.01 ignored under --" << z << ": " << log.substr(at, 80);
    }
    // bf16 gradient communication: within the 1 % of the plain-DP bf16 case below, and not the
    // f32 curve bit for bit (the option is applied)
    if (n > 1) {
      c.grad_comm_dtype = Precision::bf16;
      Curve bf = run_layout(c, tag + "_bf16comm");
      ASSERT_EQ(bf.loss.size(), want.loss.size());
      bool differs = false;
      for (size_t i = 0; i < bf.loss.size(); ++i) {
        EXPECT_NEAR(bf.loss[i], want.loss[i], 0.01 * want.loss[i]) << z << ", bf16 comm, step " << i + 1;
        EXPECT_NEAR(bf.grad_norm[i], want.grad_norm[i], 0.01 * want.grad_norm[i]) << z << ", bf16 comm, step " << i + 1;
        differs = differs || bf.grad_norm[i] != small.grad_norm[i];
      }
      EXPECT_TRUE(differs) << "--grad-comm-dtype bf16 ignored under --" << z;
    }
    // bf16 with f32 masters sharded: within 2% of the f32 curve
    c = base_config();
    c.dp = n;
    c.zero = stage;
    c.precision = Precision::bf16;
    Curve got = run_layout(c, tag + "_bf16");
    ASSERT_EQ(got.loss.size(), want.loss.size());
    for (size_t i = 0; i < got.loss.size(); ++i) EXPECT_NEAR(got.loss[i], want.loss[i], 0.02 * want.loss[i]) << z;
  }
}

TEST(Layouts, Bf16GradientCommunicationWithinOnePercent) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.dp = n;
  c.grad_comm_dtype = Precision::bf16;
  Curve want = reference(c, n), got = run_layout(c, "dp_bf16comm");
  ASSERT_EQ(got.loss.size(), want.loss.size());
  for (size_t i = 0; i < got.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], want.loss[i], 0.01 * want.loss[i]);
    EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i], 0.01 * want.grad_norm[i]);
  }
}

// fp8 (the blocks' GEMMs through ops::fp8_linear, current per-tensor scaling): dp n with ZeRO-1
// against one process under fp8 on the same global batch, within that run's own noise envelope
// (layouts_common.h). Each rank's micro-batch is one of the reference's micro-batches, so every
// cast sees the same tensor, the same amax and the same scale; only the sums over ranks change
// order. The noise envelope's resplit re-cuts the batch, so its casts see other tensors and other
// scales: FP8 noise, which makes that tolerance wide (measured 2026-12-05: 5.2e-2 at np 2, 3.8e-2
// at np 3, 0.17 at np 4; the layout at 0.66, 3.1 and 2.2 of the noise). So a fixed bound too:
// kFp8LayoutTol = 2 %, the bf16 layout checks' (the weights are bf16 here, and a summation order
// changed by the ranks moves a bf16 rounding of the weights: measured worst 3.7e-3, 3.5e-3 and
// 8.9e-3 at np 2, 3, 4); a rank's gradient not divided by dp moves it ≥ 25 %.
// And the option is applied: the curve is not the bf16 one.
constexpr double kFp8LayoutTol = 2e-2;
TEST(Layouts, Fp8DataParallelEqualsOneProcess) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.dp = n;
  c.zero = 1;
  c.precision = Precision::fp8;
  Curve want = reference(c, n);
  Curve got = run_layout(c, "dp_fp8");
  expect_same(got, want, "dp " + std::to_string(n) + " zero 1 fp8");
  double worst = 0;
  for (size_t i = 0; i < got.loss.size(); ++i) {
    worst = std::max({worst, rel(got.loss[i], want.loss[i]), rel(got.grad_norm[i], want.grad_norm[i])});
    EXPECT_NEAR(got.loss[i], want.loss[i], kFp8LayoutTol * want.loss[i]) << "fp8 dp " << n << " step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i], kFp8LayoutTol * want.grad_norm[i]) << "fp8 dp " << n << " step " << i + 1;
  }
  if (world_rank() == 0) std::printf("fp8 dp %d: worst relative distance to one process %.3g\n", n, worst);
  // the FP8 overflow / underflow counts, summed over the ranks, against one process's: the same
  // casts of the same tensors (each rank's micro-batches are the reference's), so at step 1 the
  // same counts exactly; later steps' weights and gradients differ by the sums' order (above),
  // which can move a value across a bound
  ASSERT_EQ(got.fp8_underflow.size(), got.loss.size()) << "the metrics lines carry the fp8 counts";
  ASSERT_EQ(want.fp8_underflow.size(), want.loss.size());
  for (size_t i = 0; i < got.loss.size(); ++i) {
    if (world_rank() == 0)
      std::printf("fp8 dp %d step %zu: overflow %.0f / %.0f, underflow %.0f / %.0f (one process)\n", n, i + 1,
                  got.fp8_overflow[i], want.fp8_overflow[i], got.fp8_underflow[i], want.fp8_underflow[i]);
  }
  EXPECT_EQ(got.fp8_overflow[0], want.fp8_overflow[0]);
  EXPECT_EQ(got.fp8_underflow[0], want.fp8_underflow[0]);
  c.precision = Precision::bf16;
  Curve bf = run_layout(c, "dp_fp8_bf16");
  bool differs = false;
  for (size_t i = 0; i < bf.loss.size(); ++i) differs = differs || bf.loss[i] != got.loss[i];
  EXPECT_TRUE(differs) << "--precision fp8 ran as bf16";
}

// fp8 with the other axes: ZeRO-3 (weights gathered in bf16, cast to E4M3 at use), recompute
// (the replay re-derives the same current-scaling s from the same tensors), pp 2 where the world
// is even (the stages' counts summed), and tp 2 where the
// world is even (each rank casts its own weight shard and, in the row-parallel GEMMs, its own
// input shard, with a per-tensor scale of that shard: other scales than one process, so FP8's
// own rounding differs, not only the order of sums). Each against one process under fp8: ZeRO-3
// and recompute within the run's noise envelope (the same casts of the same tensors; measured
// 2026-12-05: 3.3e-3 / 3.7e-3 at np 2, 2.1e-2 / - at np 3, 1.3e-2 / 8.9e-3 at np 4 — an FP8
// rounding flipped by a bf16 weight's last bit is a step of 2⁻⁴, so the order's noise grows
// more than in bf16); tp within kFp8TpTol: its casts round at
// other scales, so the curves part by FP8's own error (bench_fp8_error: ≤ 3.7e-2 per GEMM), which
// 5 steps at lr 3e-3 carry along: measured 1.8e-2 (tp 2) and 5.4e-2 (dp 2 × tp 2, the grad norm);
// 0.1 leaves 2× of that; a tp shard that missed its all-reduce or scaled by the other rank's s
// moves a GEMM's output by half its size or a power of two.
constexpr double kFp8TpTol = 0.1;
TEST(Layouts, Fp8ComposesWithZero3RecomputeAndTp) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.precision = Precision::fp8;
  struct Case {
    std::string name;
    TrainConfig c;
  };
  std::vector<Case> cases;
  TrainConfig z3 = c;
  z3.dp = n, z3.zero = 3;
  cases.push_back({"zero3", z3});
  TrainConfig rc = c;
  rc.dp = n, rc.recompute = true;
  cases.push_back({"recompute", rc});
  if (n % 2 == 0) {
    TrainConfig tp = c;
    tp.tp = 2, tp.dp = n / 2;
    cases.push_back({"tp2", tp});
    TrainConfig pp = c;
    pp.pp = 2, pp.dp = n / 2;
    cases.push_back({"pp2", pp});
  }
  for (const Case& k : cases) {
    const int64_t dp = k.c.dp;
    const Curve got = run_layout(k.c, "fp8_" + k.name);
    double worst = 0;
    if (k.c.tp == 1) {  // the same casts of the same tensors: the sums' order only, within the run's noise
      const Curve want = reference(k.c, dp);
      expect_same(got, want, "fp8 " + k.name);
      for (size_t i = 0; i < got.loss.size(); ++i)
        worst = std::max({worst, rel(got.loss[i], want.loss[i]), rel(got.grad_norm[i], want.grad_norm[i])});
      // the FP8 counts, summed over the ranks (a pipeline's stages hold different blocks), equal
      // one process's at step 1 (the same casts; see Fp8DataParallelEqualsOneProcess). Not under
      // recompute: its replayed forward casts count again.
      if (!k.c.recompute) {
        ASSERT_FALSE(got.fp8_underflow.empty() || want.fp8_underflow.empty()) << k.name;
        EXPECT_EQ(got.fp8_overflow[0], want.fp8_overflow[0]) << "fp8 " << k.name;
        EXPECT_EQ(got.fp8_underflow[0], want.fp8_underflow[0]) << "fp8 " << k.name;
        if (world_rank() == 0)
          std::printf("fp8 %s (np %d) step 1: underflow %.0f, one process %.0f\n", k.name.c_str(), n,
                      got.fp8_underflow[0], want.fp8_underflow[0]);
      }
    } else {
      TrainConfig one = k.c;
      one.grad_accum *= dp;  // the same global batch, K·dp micro-batches of B
      const Curve want = one_process(one);
      ASSERT_EQ(got.loss.size(), want.loss.size()) << k.name;
      for (size_t i = 0; i < got.loss.size(); ++i) {
        worst = std::max({worst, rel(got.loss[i], want.loss[i]), rel(got.grad_norm[i], want.grad_norm[i])});
        EXPECT_NEAR(got.loss[i], want.loss[i], kFp8TpTol * want.loss[i]) << "fp8 " << k.name << " step " << i + 1;
        EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i], kFp8TpTol * want.grad_norm[i]) << "fp8 " << k.name << " step " << i + 1;
      }
    }
    if (world_rank() == 0) std::printf("fp8 %s (np %d): worst relative distance to one process %.3g\n", k.name.c_str(), n, worst);
  }
}
