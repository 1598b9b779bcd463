// Pipelines against one process on the same global batch (layouts_common.h: the property, the
// tolerance): GPipe and 1F1B, interleaved 1F1B, recompute, bf16 / fp16 stages, dp 2 × pp 2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;


TEST(Layouts, PipelineBothSchedulesEqualOneProcess) {
  const int n = world_size();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    TrainConfig c = base_config();
    c.pp = n;
    c.dp = 1;
    c.grad_accum = 4;
    c.schedule = parse_enum<Schedule>(schedule, "schedule");
    c.partition = n == 3 ? PartitionKind::uniform : PartitionKind::params;
    expect_same(run_layout(c, std::string("pp_") + schedule), reference(c, 1),
                "pp " + std::to_string(n) + " " + schedule);
  }
}

// Interleaved 1F1B, 2 chunks per stage (stage s holds model chunks s and s + n): the same curve.
// m = 2n micro-batches (a multiple of p), 8 blocks so every one of the 2n chunks has a layer.
TEST(Layouts, PipelineInterleavedEqualsOneProcess) {
  const int n = world_size();
  for (PartitionKind partition : {PartitionKind::params, PartitionKind::uniform}) {
    TrainConfig c = base_config();
    c.layers = 8;
    c.pp = n;
    c.dp = 1;
    c.grad_accum = 2 * n;
    c.schedule = Schedule::interleaved;
    c.virtual_stages = 2;
    c.partition = partition;
    expect_same(run_layout(c, "pp_interleaved"), reference(c, 1),
                "pp " + std::to_string(n) + " interleaved v 2, partition " + to_string(partition));
  }
}

// Recompute (each block's forward replayed in backward) against the one-process run WITHOUT it:
// in one process the replay is the same computation, so the curve is the same to the bit; under
// pp and tp it is the layout's curve.
TEST(Layouts, RecomputeGivesTheSameCurve) {
  const int n = world_size();
  TrainConfig c = base_config();
  Curve plain = reference(c, 1);
  TrainConfig rc = c;
  rc.recompute = true;
  const Curve one = one_process(rc);
  EXPECT_EQ(one.loss, plain.loss) << "recompute in one process changed the loss";
  EXPECT_EQ(one.grad_norm, plain.grad_norm) << "recompute in one process changed the grad norm";
  rc.pp = n;
  rc.dp = 1;
  rc.schedule = Schedule::one_f_one_b;
  rc.partition = PartitionKind::uniform;
  expect_same(run_layout(rc, "recompute_pp"), plain, "recompute with pp " + std::to_string(n));
  if (n % 2 == 0) {
    TrainConfig t = c;
    t.heads = 12;
    t.d_model = 48;
    const Curve plain_tp = reference(t, n / 2);
    t.recompute = true;
    t.tp = 2;
    t.dp = n / 2;
    expect_same(run_layout(t, "recompute_tp"), plain_tp, "recompute with tp 2");
  }
}

TEST(Layouts, LowPrecisionPipelineTracksF32) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.pp = n;
  c.dp = 1;
  Curve f32 = reference(c, 1);
  for (const char* prec : {"bf16", "fp16"}) {
    c.precision = parse_enum<Precision>(prec, "precision");
    Curve one = reference(c, 1), got = run_layout(c, std::string("pp_") + prec);
    ASSERT_EQ(got.loss.size(), one.loss.size());
    for (size_t i = 0; i < got.loss.size(); ++i) {
      EXPECT_NEAR(got.loss[i], one.loss[i], 1e-3 * one.loss[i]) << prec << " step " << i + 1;  // one rounding order apart
      EXPECT_NEAR(got.loss[i], f32.loss[i], 0.02 * f32.loss[i]) << prec << " vs f32, step " << i + 1;
    }
  }
}

TEST(Layouts, DataTimesPipelineGrid) {
  if (world_size() != 4) GTEST_SKIP() << "dp 2 × pp 2 needs 4 ranks";
  TrainConfig c = base_config();
  c.dp = 2;
  c.pp = 2;
  c.schedule = Schedule::one_f_one_b;
  expect_same(run_layout(c, "dp2pp2"), reference(c, 2), "dp 2 × pp 2");
  c.schedule = Schedule::interleaved;  // the DP buckets of the earlier chunk go out in finish()
  c.virtual_stages = 2;
  expect_same(run_layout(c, "dp2pp2_interleaved"), reference(c, 2), "dp 2 × pp 2, interleaved v 2");
}
