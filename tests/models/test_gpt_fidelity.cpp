// The GPT against Hugging Face transformers (tests/fixtures/hf_gpt2_tiny, written by
// tests/fixtures/make_hf_gpt2_tiny.py): the first batch's logits, then 5 AdamW steps of loss
// and grad norm to 1e-5 relative in f32 — as one batch of 4 and as 2 micro-batches × grad-accum 2;
// fp16 and bf16 runs within 2% of the f32 losses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "models/hf_gpt2.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/autograd.h"
#include "train_helpers.h"

namespace st {
namespace {

using runtime::OptimizerKind;
using runtime::Precision;
using testing::fixture_dir;
using testing::reference_config;

struct RefStep {
  double loss, grad_norm;
};

std::vector<RefStep> reference_steps() {
  auto j = runtime::read_json_file(fixture_dir() + "/reference.json");
  std::vector<RefStep> out;
  for (auto& s : j.at("steps")) out.push_back({s.at("loss").get<double>(), s.at("grad_norm").get<double>()});
  return out;
}

std::vector<runtime::StepMetrics> train(const runtime::TrainConfig& cfg) {
  runtime::Trainer t(cfg);
  std::vector<runtime::StepMetrics> out;
  while (t.step() < cfg.steps) out.push_back(t.train_step());
  return out;
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(GptFidelity, FirstBatchLogitsMatchTransformers) {
  auto model = models::load_hf_gpt2(fixture_dir(), std::make_shared<Generator>(0));
  model->eval();
  runtime::TokenData data(fixture_dir() + "/tokens.bin");
  runtime::TokenBatch b = data.read(0, 4, 32);
  NoGradGuard ng;
  Tensor logits = model->forward(b.inputs);  // (4, 32, 256)
  Tensor ref = runtime::load_safetensors(fixture_dir() + "/logits0.safetensors").at("logits");
  ASSERT_EQ(logits.shape(), ref.shape());
  auto a = logits.to_double(), r = ref.to_double();
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err = std::max(max_err, std::fabs(a[i] - r[i]));
    max_ref = std::max(max_ref, std::fabs(r[i]));
  }
  std::cout << "max |logits − HF| " << max_err << " (max |HF| " << max_ref << ")\n";
  EXPECT_GT(max_ref, 0.1);  // the reference is not trivially zero
  EXPECT_LT(max_err, 1e-5 * max_ref) << "max |logits − HF| = " << max_err << " (max |HF| " << max_ref << ")";
}

void expect_matches_reference(const std::vector<runtime::StepMetrics>& got) {
  auto ref = reference_steps();
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t s = 0; s < ref.size(); ++s)
    worst = std::max({worst, rel(got[s].loss, ref[s].loss), rel(got[s].grad_norm, ref[s].grad_norm)});
  std::cout << "worst relative error vs transformers: " << worst << "\n";
  for (size_t s = 0; s < ref.size(); ++s) {
    EXPECT_EQ(got[s].step, static_cast<int64_t>(s + 1));
    EXPECT_LT(rel(got[s].loss, ref[s].loss), 1e-5) << "step " << s + 1 << " loss " << got[s].loss << " vs " << ref[s].loss;
    EXPECT_LT(rel(got[s].grad_norm, ref[s].grad_norm), 1e-5)
        << "step " << s + 1 << " grad norm " << got[s].grad_norm << " vs " << ref[s].grad_norm;
    EXPECT_FALSE(got[s].skipped);
  }
}

TEST(GptFidelity, FiveAdamWStepsMatchTransformers) { expect_matches_reference(train(reference_config())); }

TEST(GptFidelity, GradAccumulationMatchesOneLargeBatch) {
  auto cfg = reference_config();
  cfg.micro_batch = 2;
  cfg.grad_accum = 2;
  expect_matches_reference(train(cfg));
}

void expect_low_precision_close(const std::string& precision) {
  auto ref = reference_steps();
  auto cfg = reference_config();
  cfg.precision = runtime::parse_enum<Precision>(precision, "precision");
  auto got = train(cfg);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t s = 0; s < ref.size(); ++s)
    std::cout << precision << " step " << s + 1 << " loss " << got[s].loss << " (f32 " << ref[s].loss << "), norm "
              << got[s].grad_norm << " (f32 " << ref[s].grad_norm << ")\n";
  for (size_t s = 0; s < ref.size(); ++s) {
    EXPECT_FALSE(got[s].skipped) << precision << " step " << s + 1;
    EXPECT_LT(rel(got[s].loss, ref[s].loss), 0.02) << precision << " step " << s + 1 << ": " << got[s].loss;
    EXPECT_LT(rel(got[s].grad_norm, ref[s].grad_norm), 0.02) << precision << " step " << s + 1;
  }
}

TEST(GptFidelity, Fp16WithinTwoPercentOfF32) { expect_low_precision_close("fp16"); }
TEST(GptFidelity, Bf16WithinTwoPercentOfF32) { expect_low_precision_close("bf16"); }

TEST(GptFidelity, LowPrecisionReallyComputesInLowPrecision) {
  auto cfg = reference_config();
  cfg.precision = Precision::bf16;
  runtime::Trainer t(cfg);
  for (auto& [n, p] : t.model().named_parameters()) EXPECT_EQ(p.dtype(), DType::bf16) << n;
  // the masters stay f32 and the model holds their rounding
  t.train_step();
  const auto& opt = t.optimizer();
  for (size_t i = 0; i < opt.size(); ++i) {
    EXPECT_EQ(opt.master(i).dtype(), DType::f32);
    auto m = opt.master(i).to_double();
    auto p = opt.params()[i].second.to_double();
    for (size_t k = 0; k < m.size(); ++k) ASSERT_EQ(p[k], bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(m[k]))));
  }
  EXPECT_EQ(t.scaler().scale(), 1.0);  // no loss scaling in bf16
}

TEST(GptFidelity, Fp16UsesLossScaling) {
  auto cfg = reference_config();
  cfg.precision = Precision::fp16;
  cfg.steps = 1;
  runtime::Trainer t(cfg);
  auto m = t.train_step();
  EXPECT_EQ(m.loss_scale, 65536.0);
  EXPECT_EQ(t.scaler().scale(), 65536.0);
  EXPECT_EQ(t.scaler().good_steps(), 1);
}

}  // namespace
}  // namespace st
