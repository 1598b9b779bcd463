// LR schedules, clipping by the global norm, the fp16 loss scaler, precision names and the
// metrics line — each against closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "runtime/optim/grad_clip.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/observe/metrics.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/precision_policy.h"

namespace st::runtime {
namespace {

TEST(LrSchedule, ConstWithWarmup) {
  LrSchedule s{LrScheduleKind::constant, 0.1, 4, 100, 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.025);
  EXPECT_DOUBLE_EQ(s.at(3), 0.1);
  EXPECT_DOUBLE_EQ(s.at(50), 0.1);
  LrSchedule none{LrScheduleKind::constant, 0.1, 0, 10, 0.1};
  EXPECT_DOUBLE_EQ(none.at(0), 0.1);
}

TEST(LrSchedule, CosineFromLrToTheFloor) {
  LrSchedule s{LrScheduleKind::cosine, 1.0, 2, 12, 0.1};  // cosine over steps 2 … 11
  EXPECT_DOUBLE_EQ(s.at(0), 0.5);
  EXPECT_DOUBLE_EQ(s.at(1), 1.0);
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_NEAR(s.at(11), 0.1, 1e-12);
  const double mid = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 4.0 / 9.0));
  EXPECT_NEAR(s.at(6), mid, 1e-12);
  for (int64_t k = 3; k < 12; ++k) EXPECT_LT(s.at(k), s.at(k - 1));
  EXPECT_NEAR(s.at(50), 0.1, 1e-12);  // past the end: stays at the floor
  EXPECT_THROW(parse_enum<LrScheduleKind>("linear", "lr schedule"), ValueError);  // a name the table lacks
}

TEST(GradClip, ScalesByClipOverNormWhenAbove) {
  std::vector<Tensor> g = {Tensor::from_vector(std::vector<double>{3.0, 0.0}, {2}),
                           Tensor::from_vector(std::vector<double>{0.0, 4.0}, {1, 2})};
  double norm = std::sqrt(local_sum_squares(g));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  double coef = clip_by_global_norm(g, norm, 1.0);
  EXPECT_DOUBLE_EQ(coef, 1.0 / (5.0 + 1e-6));
  EXPECT_NEAR(g[0].to_double()[0], 3.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(g[1].to_double()[1], 4.0 / (5.0 + 1e-6), 1e-7);
  // below the threshold, or clip 0: untouched
  std::vector<Tensor> h = {Tensor::from_vector(std::vector<double>{0.3, 0.4}, {2})};
  EXPECT_EQ(clip_by_global_norm(h, 0.5, 1.0), 1.0);
  EXPECT_EQ(clip_by_global_norm(h, 50.0, 0.0), 1.0);
  EXPECT_FLOAT_EQ(static_cast<float>(h[0].to_double()[1]), 0.4f);
}

TEST(GradClip, FindsInfAndNan) {
  std::vector<Tensor> g = {Tensor::zeros({3}), Tensor::zeros({2}, DType::f16)};
  EXPECT_FALSE(any_inf_nan(g));
  g[1].fill_(INFINITY);
  EXPECT_TRUE(any_inf_nan(g));
  g[1].fill_(0.0);
  g[0].fill_(NAN);
  EXPECT_TRUE(any_inf_nan(g));
}

TEST(LossScaler, GrowsHalvesSkipsAndStopsAtTheFloor) {
  LossScaler s(true, 65536.0, 3, 1.0);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(false));  // third clean step in a row: ×2
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_FALSE(s.update(false));
  EXPECT_TRUE(s.update(true));  // overflow: skip, ×0.5, counter reset
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.good_steps(), 0);
  LossScaler f(true, 4.0, 2000, 1.0);
  EXPECT_TRUE(f.update(true));
  EXPECT_TRUE(f.update(true));
  EXPECT_EQ(f.scale(), 1.0);
  EXPECT_FALSE(f.warned_at_floor());
  testing::internal::CaptureStderr();
  EXPECT_TRUE(f.update(true));  // at the floor: still skipped, warned once
  EXPECT_TRUE(f.update(true));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.scale(), 1.0);
  EXPECT_TRUE(f.warned_at_floor());
  EXPECT_NE(err.find("floor"), std::string::npos);
  EXPECT_EQ(err.find("floor"), err.rfind("floor"));  // one warning
  LossScaler off(false);
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_FALSE(off.update(true));
}

TEST(LossScaler, DefaultsAreTheContract) {
  LossScaler s(true);
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(Precision, Names) {
  EXPECT_EQ(precision_policy(parse_enum<Precision>("fp16", "precision")).compute, DType::f16);
  EXPECT_EQ(precision_policy(parse_enum<Precision>("bf16", "precision")).compute, DType::bf16);
  EXPECT_EQ(precision_policy(parse_enum<Precision>("fp32", "precision")).compute, DType::f32);
  EXPECT_THROW(parse_enum<Precision>("fp4", "precision"), ValueError);
}

TEST(Metrics, JsonLineHasTheContractKeysInOrder) {
  StepMetrics m;
  m.step = 1, m.loss = 5.5, m.grad_norm = 1.5, m.lr = 1e-3, m.loss_scale = 65536, m.tokens_per_s = 100;
  m.step_ms = 12.5, m.mem_bytes = 1234;
  auto j = m.to_json();
  std::vector<std::string> keys;
  for (auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "loss", "grad_norm", "lr", "loss_scale", "skipped", "tokens_per_s",
                                            "step_ms", "mfu", "mem_bytes", "mem_total_bytes", "mem_params", "mem_grads",
                                            "mem_optim", "mem_act_peak", "mem_peak"}));
  EXPECT_EQ(j.dump().substr(0, 32), "{\"step\":1,\"loss\":5.5,\"grad_norm\"");
  m.grad_norm = NAN;
  m.skipped = true;
  EXPECT_TRUE(m.to_json()["grad_norm"].is_null());
  std::string path = (std::filesystem::temp_directory_path() / "st_metrics_test.jsonl").string();
  {
    MetricsWriter w(path, false);
    w.write(m);
    m.step = 2;
    w.write(m);
  }
  auto back = read_metrics(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1]["step"], 2);
  EXPECT_EQ(back[0]["skipped"], true);
  std::filesystem::remove(path);
  std::string line = m.line(10);
  EXPECT_NE(line.find("step 2/10"), std::string::npos) << line;
  EXPECT_NE(line.find("skipped"), std::string::npos) << line;
  EXPECT_EQ(line.find("fp8"), std::string::npos) << line;
}

// The step line names the loss scale only where there is one (fp16: not 1, or a skipped step): 15
// columns less on every other line (issue 56, item 9).
TEST(Metrics, StepLineShowsTheLossScaleOnlyWhereThereIsOne) {
  StepMetrics m;
  m.step = 200, m.loss = 2.875072, m.lr = 1e-3, m.grad_norm = 1.3377, m.loss_scale = 1, m.tokens_per_s = 12272;
  m.step_ms = 10.4, m.mem_bytes = int64_t{2516582}, m.mem_total_bytes = int64_t{25232932864};
  std::string line = m.line(100000);
  EXPECT_EQ(line, "step 200/100000 | loss 2.875072 | lr 1.000e-03 | grad norm 1.3377 | 12272 tok/s | 10.4 ms | mem 2.4 MiB "
                  "(0.0% of 23.5 GiB)");
  m.loss_scale = 65536;
  line = m.line(100000);
  EXPECT_NE(line.find(" | grad norm 1.3377 | loss scale 65536 | 12272 tok/s | "), std::string::npos) << line;
  m.loss_scale = 1, m.skipped = true;
  EXPECT_NE(m.line(100000).find("loss scale 1 |"), std::string::npos) << m.line(100000);
}

// --precision fp8: the two counts after the contract's keys, integers; the step line names them
// only when one is nonzero
TEST(Metrics, Fp8CountsFollowTheContractKeys) {
  StepMetrics m;
  m.step = 3;
  m.fp8_overflow = 0;
  m.fp8_underflow = 0;
  auto j = m.to_json();
  ASSERT_TRUE(j.contains("fp8_overflow") && j.contains("fp8_underflow")) << j.dump();
  EXPECT_TRUE(j["fp8_overflow"].is_number_integer() && j["fp8_underflow"].is_number_integer());
  std::vector<std::string> keys;
  for (auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys[keys.size() - 2], "fp8_overflow");
  EXPECT_EQ(keys.back(), "fp8_underflow");
  EXPECT_EQ(m.line(10).find("fp8"), std::string::npos) << "zero counts are not shown";
  m.fp8_underflow = 5000000000;  // past 32 bits
  EXPECT_EQ(m.to_json()["fp8_underflow"].get<int64_t>(), 5000000000);
  const std::string line = m.line(10);
  EXPECT_NE(line.find("fp8 overflow 0, underflow 5000000000"), std::string::npos) << line;
}

}  // namespace
}  // namespace st::runtime
