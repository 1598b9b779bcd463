// The whole training stack on CUDA against Hugging Face transformers (tests/fixtures/hf_gpt2_tiny,
// written by tests/fixtures/make_hf_gpt2_tiny.py on the CPU): the first batch's logits and 5
// AdamW steps (loss, grad norm) to 1e-4 relative in f32 — exact f32 GEMMs, TF32 off (the default
// of --tf32, ops/matmul.h's set_gemm_allow_tf32, asserted here) — and bf16/fp16 runs within 2% of the f32 reference.
// Same configuration as the CPU fidelity test (tests/models/test_gpt_fidelity.cpp), device "cuda".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "../models/train_helpers.h"
#include "models/hf_gpt2.h"
#include "ops/matmul.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/autograd.h"

namespace st {
namespace {

using runtime::OptimizerKind;
using runtime::Precision;
using testing::fixture_dir;

struct RefStep {
  double loss, grad_norm;
};

std::vector<RefStep> reference_steps() {
  auto j = runtime::read_json_file(fixture_dir() + "/reference.json");
  std::vector<RefStep> out;
  for (auto& s : j.at("steps")) out.push_back({s.at("loss").get<double>(), s.at("grad_norm").get<double>()});
  return out;
}

runtime::TrainConfig cuda_config(const std::string& precision) {
  runtime::TrainConfig c = testing::reference_config();
  c.device = Device::cuda;
  c.precision = runtime::parse_enum<Precision>(precision, "precision");
  return c;
}

// Trains cfg.steps steps; checks that every parameter really lives on the GPU.
std::vector<runtime::StepMetrics> train(const runtime::TrainConfig& cfg) {
  runtime::Trainer t(cfg);
  for (auto& [n, p] : t.model().named_parameters()) EXPECT_TRUE(p.is_cuda()) << n;
  std::vector<runtime::StepMetrics> out;
  while (t.step() < cfg.steps) out.push_back(t.train_step());
  return out;
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(GpuTrainer, F32GemmsAreExactByDefault) {
  EXPECT_FALSE(ops::cuda::gemm_allow_tf32());  // nothing has switched TF32 on yet
}

TEST(GpuTrainer, FirstBatchLogitsMatchTransformers) {
  auto model = models::load_hf_gpt2(fixture_dir(), std::make_shared<Generator>(0));
  model->move_parameters(Device::cuda);
  model->eval();
  runtime::TokenData data(fixture_dir() + "/tokens.bin");
  runtime::TokenBatch b = data.read(0, 4, 32);
  NoGradGuard ng;
  Tensor logits = model->forward(b.inputs.to(Device::cuda));  // (4, 32, 256) on the GPU
  ASSERT_TRUE(logits.is_cuda());
  Tensor ref = runtime::load_safetensors(fixture_dir() + "/logits0.safetensors").at("logits");
  ASSERT_EQ(logits.shape(), ref.shape());
  auto a = logits.to(Device::cpu).to_double(), r = ref.to_double();
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err = std::max(max_err, std::fabs(a[i] - r[i]));
    max_ref = std::max(max_ref, std::fabs(r[i]));
  }
  std::cout << "cuda: max |logits − HF| " << max_err << " (max |HF| " << max_ref << ")\n";
  EXPECT_GT(max_ref, 0.1);  // the reference is not trivially zero
  EXPECT_LT(max_err, 1e-4 * max_ref);
}

TEST(GpuTrainer, FiveAdamWStepsMatchTransformers) {
  auto ref = reference_steps();
  auto got = train(cuda_config("fp32"));
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t s = 0; s < ref.size(); ++s) {
    worst = std::max({worst, rel(got[s].loss, ref[s].loss), rel(got[s].grad_norm, ref[s].grad_norm)});
    EXPECT_EQ(got[s].step, static_cast<int64_t>(s + 1));
    EXPECT_FALSE(got[s].skipped);
    EXPECT_LT(rel(got[s].loss, ref[s].loss), 1e-4) << "step " << s + 1 << " loss " << got[s].loss << " vs " << ref[s].loss;
    EXPECT_LT(rel(got[s].grad_norm, ref[s].grad_norm), 1e-4)
        << "step " << s + 1 << " grad norm " << got[s].grad_norm << " vs " << ref[s].grad_norm;
  }
  std::cout << "cuda fp32: worst relative error vs transformers " << worst << "\n";
}

void expect_low_precision_close(const std::string& precision) {
  auto ref = reference_steps();
  auto got = train(cuda_config(precision));
  ASSERT_EQ(got.size(), ref.size());
  for (size_t s = 0; s < ref.size(); ++s) {
    std::cout << "cuda " << precision << " step " << s + 1 << " loss " << got[s].loss << " (f32 " << ref[s].loss
              << "), norm " << got[s].grad_norm << " (f32 " << ref[s].grad_norm << ")\n";
    EXPECT_FALSE(got[s].skipped) << precision << " step " << s + 1;
    EXPECT_LT(rel(got[s].loss, ref[s].loss), 0.02) << precision << " step " << s + 1 << ": " << got[s].loss;
    EXPECT_LT(rel(got[s].grad_norm, ref[s].grad_norm), 0.02) << precision << " step " << s + 1;
  }
}

TEST(GpuTrainer, Bf16WithinTwoPercentOfF32) { expect_low_precision_close("bf16"); }
TEST(GpuTrainer, Fp16WithinTwoPercentOfF32) { expect_low_precision_close("fp16"); }

}  // namespace
}  // namespace st
