// ZeRO-3 (every parameter sharded per layer, runtime/parallel/zero3.h) against one process on the
// same global batch (layouts_common.h: the property, the tolerance).
#include <gtest/gtest.h>

#include <string>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;


// ZeRO-3 (every parameter sharded per layer, gathered around each forward and backward, the
// gradients reduce-scattered per layer every micro-batch): the one-process curve within the same
// noise envelope as every layout (the reduce-scatter sums the ranks in another order than the
// one-process accumulation, as plain DP's all-reduce does): dp n with accumulation (K = 2 in
// base_config) and without, with pp 2 and tp 2 at np 4, with recompute, and bf16 within the 2 %
// ZeRO-1/2's bf16 case allows (bf16 rounding of the gathered parameters and gradient shards).
TEST(Layouts, Zero3EqualsOneProcess) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.dp = n;
  c.zero = 3;
  const Curve want = reference(c, n);
  testing::internal::CaptureStdout();
  const Curve got = run_layout(c, "zero3");
  const std::string log = testing::internal::GetCapturedStdout();
  expect_same(got, want, "dp " + std::to_string(n) + " zero 3");
  if (world_rank() == 0) {  // the run summary: the parameters were gathered and reduce-scattered per unit
    const size_t at = log.find("zero 3: ");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_EQ(std::stoi(log.substr(at + 8)), 7) << "units: wte, wpe, 4 blocks, ln_f: " << log.substr(at, 120);
  }
  TrainConfig k1 = c;
  k1.grad_accum = 1;
  k1.micro_batch = 3;
  expect_same(run_layout(k1, "zero3_k1"), reference(k1, n), "dp " + std::to_string(n) + " zero 3, K=1");
  TrainConfig rc = c;
  rc.recompute = true;
  expect_same(run_layout(rc, "zero3_rc"), want, "dp " + std::to_string(n) + " zero 3, recompute");
  if (n == 4) {
    TrainConfig p = c;
    p.dp = 2;
    p.pp = 2;
    expect_same(run_layout(p, "zero3_pp2"), reference(p, 2), "dp 2 x pp 2 zero 3");
    TrainConfig t = c;
    t.heads = 12;
    t.d_model = 48;
    t.vocab = 62;
    t.dp = 2;
    t.tp = 2;
    expect_same(run_layout(t, "zero3_tp2"), reference(t, 2), "dp 2 x tp 2 zero 3");
  }
  TrainConfig bf = c;
  bf.precision = Precision::bf16;
  const Curve got_bf = run_layout(bf, "zero3_bf16");
  ASSERT_EQ(got_bf.loss.size(), want.loss.size());
  for (size_t i = 0; i < got_bf.loss.size(); ++i) EXPECT_NEAR(got_bf.loss[i], want.loss[i], 0.02 * want.loss[i]) << "zero 3 bf16";
}
