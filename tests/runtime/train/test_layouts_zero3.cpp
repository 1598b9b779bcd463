// ZeRO-3 (every parameter sharded per layer, runtime/parallel/zero3.h) against one process on the
// same global batch (layouts_common.h: the property, the tolerance).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// fp16 under ZeRO-3 (f16 shards and gathers, f32 masters of the pieces, dynamic loss scaling): the
// one-process fp16 curve within its own noise (f16 rounding, layouts_common.h), and an overflow
// injected into the LAST rank's gradient shard at step 2 skipped by every rank — the scale halves
// everywhere, and steps 3-5 still follow the one-process run with the same overflow (a rank that
// stepped while the others skipped would leave its shard of every parameter elsewhere). dp n,
// and at np 4 dp 2 × pp 2 under the interleaved schedule as well.
TEST(Layouts, Zero3Fp16SkipsAnOverflowOnEveryRank) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.precision = Precision::fp16;
  c.zero = 3;
  TrainSeams ref_seam, last_seam;  // step 2 (from 1): the one-process reference's only rank, the layout's last
  ref_seam.after_gradients = infinite_gradient(2, false, 0);
  last_seam.after_gradients = infinite_gradient(2, false, n - 1);
  const Curve want = reference(c, n, ref_seam);
  Curve want_pp;
  if (n == 4) want_pp = reference(c, 2, ref_seam);
  std::vector<std::pair<std::string, Curve>> got;
  TrainConfig dp = c;
  dp.dp = n;
  got.emplace_back("dp " + std::to_string(n), run_layout(dp, "zero3_fp16", last_seam));
  if (n == 4) {
    TrainConfig pp = c;
    pp.dp = 2;
    pp.pp = 2;
    pp.schedule = Schedule::interleaved;
    pp.virtual_stages = 2;
    got.emplace_back("dp 2 x pp 2 interleaved v 2", run_layout(pp, "zero3_fp16_interleaved", last_seam));
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const Curve& curve = got[k].second;
    const Curve& ref = k == 0 ? want : want_pp;
    const std::string what = "zero 3 fp16, " + got[k].first;
    ASSERT_EQ(curve.loss.size(), 5u) << what;
    EXPECT_EQ(curve.skipped, (std::vector<bool>{false, true, false, false, false})) << what;
    EXPECT_EQ(ref.skipped, curve.skipped) << what << ": the reference skipped elsewhere";
    EXPECT_EQ(curve.loss_scale[1], 65536.0) << what;
    EXPECT_EQ(curve.loss_scale[2], 32768.0) << what << ": the scale halves after the skipped step";
    // every step but the skipped one (no grad norm there), loss and grad norm within the noise
    Curve kept = curve, ref_kept = ref;
    for (Curve* v : {&kept, &ref_kept}) {
      v->loss.erase(v->loss.begin() + 1);
      v->grad_norm.erase(v->grad_norm.begin() + 1);
    }
    ref_kept.loss_noise.erase(ref_kept.loss_noise.begin() + 1);
    ref_kept.norm_noise.erase(ref_kept.norm_noise.begin() + 1);
    expect_same(kept, ref_kept, what + ", steps 1, 3-5");
  }
}

// The interleaved 1F1B schedule under ZeRO-3 (np 4: dp 2 × pp 2, 2 chunks per stage; the tied wte
// on the first and the last chunk, so on both stages): a chunk's layers gathered and prefetched
// within the chunk, its gradients reduce-scattered as its backward ends, the tied weight's shards
// summed over the stages after them.
TEST(Layouts, Zero3WithTheInterleavedSchedule) {
  if (world_size() != 4) GTEST_SKIP() << "dp 2 × pp 2 needs 4 ranks (ZeRO-3 needs dp > 1)";
  TrainConfig c = base_config();
  c.dp = 2;
  c.pp = 2;
  c.zero = 3;
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  expect_same(run_layout(c, "zero3_dp2pp2_interleaved"), reference(c, 2), "dp 2 × pp 2 zero 3, interleaved v 2");
}

// Every axis at once under ZeRO-3 (8 ranks: dp 2 × tp 2 × pp 2; each tp rank's shards split again
// over its dp group, per stage): 1F1B with recompute, and the interleaved schedule (ctest:
// test_layouts_np8).
TEST(Layouts, Zero3EveryAxisAtOnce) {
  if (world_size() != 8) GTEST_SKIP() << "dp 2 × tp 2 × pp 2 needs 8 ranks (ctest: test_layouts_np8)";
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  c.vocab = 62;
  c.dp = 2;
  c.tp = 2;
  c.pp = 2;
  c.zero = 3;
  const Curve want = reference(c, 2);
  TrainConfig rc = c;
  rc.recompute = true;
  expect_same(run_layout(rc, "dp2tp2pp2_zero3_rc"), want, "dp 2 × tp 2 × pp 2, zero 3, recompute");
  c.schedule = Schedule::interleaved;
  c.virtual_stages = 2;
  expect_same(run_layout(c, "dp2tp2pp2_zero3_interleaved"), want, "dp 2 × tp 2 × pp 2, zero 3, interleaved v 2");
}
