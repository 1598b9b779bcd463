// Llama against Hugging Face transformers' LlamaForCausalLM (tests/fixtures/hf_llama_tiny, written
// by tests/fixtures/make_hf_llama_tiny.py: 2 layers, C 64, 4 heads over 2 key/value heads, SwiGLU
// 96, V 256, rope theta 500000, an untied head, fp32): the first batch's logits, the fixture's
// AdamW steps (loss and grad norm) to the GPT-2 fixture's bounds (1e-5 relative, as one batch of 4
// and as 2 micro-batches × grad-accum 2), bf16 within 2 % of f32, and a checkpoint written under
// --model llama carrying exactly the fixture's tensor names, shapes and config (what
// from_pretrained needs for no missing or unexpected keys; make_hf_llama_tiny.py --load-ours
// checks it with transformers itself). The fixture must exist: without it these tests fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "models/llama.h"
#include "runtime/common/json_io.h"
#include "runtime/data/token_data.h"
#include "runtime/generate/sampler.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/trainer.h"
#include "tensor/autograd.h"

namespace st {
namespace {

const std::string kDir = ST_LLAMA_FIXTURE_DIR;

runtime::TrainConfig reference_config() {
  const auto ref = runtime::read_json_file(kDir + "/reference.json");
  runtime::TrainConfig c;
  c.model = "llama";
  c.init_from = kDir;
  c.data = kDir + "/tokens.bin";
  c.micro_batch = ref.at("batch").get<int64_t>();
  c.grad_accum = 1;
  c.seq_len = ref.at("seq_len").get<int64_t>();
  c.precision = runtime::Precision::fp32;
  c.optimizer = runtime::OptimizerKind::adamw;
  c.lr = ref.at("lr").get<double>();
  c.weight_decay = ref.at("weight_decay").get<double>();
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.clip = ref.at("clip").get<double>();
  c.lr_schedule = runtime::LrScheduleKind::constant;
  c.warmup = 0;
  c.steps = static_cast<int64_t>(ref.at("steps").size());
  c.log_every = 0;
  c.progress = false;
  return c;
}

std::vector<runtime::StepMetrics> train(const runtime::TrainConfig& cfg) {
  runtime::Trainer t(cfg);
  std::vector<runtime::StepMetrics> out;
  while (t.step() < cfg.steps) out.push_back(t.train_step());
  return out;
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(LlamaFidelity, FixtureIsTheSpecifiedModel) {
  const auto cfg = runtime::read_json_file(kDir + "/config.json");
  const models::DecoderSpec s = models::llama_spec(cfg, kDir + "/config.json");
  EXPECT_EQ(s.layers, 2);
  EXPECT_EQ(s.d_model, 64);
  EXPECT_EQ(s.heads, 4);
  EXPECT_EQ(s.kv_heads, 2) << "grouped-query";
  EXPECT_EQ(s.ffn, 96);
  EXPECT_EQ(s.vocab, 256);
  EXPECT_FALSE(s.tied_head);
  EXPECT_EQ(s.rope.theta, 500000.0) << "a theta other than 10000";
  EXPECT_GE(runtime::read_json_file(kDir + "/reference.json").at("steps").size(), 5u);
}

TEST(LlamaFidelity, FirstBatchLogitsMatchTransformers) {
  auto model = runtime::load_model_for_sampling(kDir);
  model->eval();
  runtime::TokenData data(kDir + "/tokens.bin");
  runtime::TokenBatch b = data.read(0, 4, 32);
  NoGradGuard ng;
  Tensor logits = model->forward(b.inputs);  // (4, 32, 256)
  Tensor ref = runtime::load_safetensors(kDir + "/logits0.safetensors").at("logits");
  ASSERT_EQ(logits.shape(), ref.shape());
  auto a = logits.to_double(), r = ref.to_double();
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err = std::max(max_err, std::fabs(a[i] - r[i]));
    max_ref = std::max(max_ref, std::fabs(r[i]));
  }
  std::cout << "max |logits − HF| " << max_err << " (max |HF| " << max_ref << ")\n";
  EXPECT_GT(max_ref, 0.1);
  // the GPT-2 fixture's bound: f32 roundoff of a 2-layer forward is ~1e-7 of the logits' scale
  EXPECT_LT(max_err, 1e-5 * max_ref);
}

void expect_matches_reference(const std::vector<runtime::StepMetrics>& got) {
  const auto ref = runtime::read_json_file(kDir + "/reference.json").at("steps");
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t s = 0; s < ref.size(); ++s) {
    const double l = ref[s].at("loss").get<double>(), n = ref[s].at("grad_norm").get<double>();
    worst = std::max({worst, rel(got[s].loss, l), rel(got[s].grad_norm, n)});
    EXPECT_LT(rel(got[s].loss, l), 1e-5) << "step " << s + 1 << " loss " << got[s].loss << " vs " << l;
    EXPECT_LT(rel(got[s].grad_norm, n), 1e-5) << "step " << s + 1 << " grad norm " << got[s].grad_norm << " vs " << n;
    EXPECT_FALSE(got[s].skipped);
  }
  std::cout << "worst relative error vs transformers: " << worst << "\n";
}

TEST(LlamaFidelity, AdamWStepsMatchTransformers) { expect_matches_reference(train(reference_config())); }

TEST(LlamaFidelity, GradAccumulationMatchesOneLargeBatch) {
  auto cfg = reference_config();
  cfg.micro_batch = 2;
  cfg.grad_accum = 2;
  expect_matches_reference(train(cfg));
}

TEST(LlamaFidelity, Bf16WithinTwoPercentOfF32) {
  auto cfg = reference_config();
  cfg.precision = runtime::Precision::bf16;
  const auto got = train(cfg);
  const auto ref = runtime::read_json_file(kDir + "/reference.json").at("steps");
  ASSERT_EQ(got.size(), ref.size());
  for (size_t s = 0; s < ref.size(); ++s)
    EXPECT_LT(rel(got[s].loss, ref[s].at("loss").get<double>()), 0.02) << "bf16 step " << s + 1 << ": " << got[s].loss;
}

// A checkpoint of `--model llama` is a save_pretrained folder: the same tensor names and shapes
// as transformers wrote (no missing, no unexpected key), a config.json that reads back as the
// same model with transformers' keys, and the trained weights (one step from the fixture's).
TEST(LlamaFidelity, CheckpointHasTransformersNamesShapesAndConfig) {
  auto cfg = reference_config();
  cfg.steps = 1;
  cfg.checkpoint_dir = (std::filesystem::temp_directory_path() / ("st_llama_ckpt_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(cfg.checkpoint_dir);
  runtime::Trainer t(cfg);
  t.train_step();
  const std::string dir = t.save_checkpoint();
  const auto ours = runtime::load_safetensors(dir + "/model.safetensors");
  const auto hf = runtime::load_safetensors(kDir + "/model.safetensors");
  for (const auto& [name, w] : hf) {
    auto it = ours.find(name);
    if (it == ours.end()) {
      ADD_FAILURE() << "missing key " << name;
      continue;
    }
    EXPECT_EQ(it->second.shape(), w.shape()) << name;
    EXPECT_EQ(it->second.dtype(), DType::f32) << name;
  }
  for (const auto& [name, w] : ours) EXPECT_TRUE(hf.count(name)) << "unexpected key " << name;
  // the weights moved by one AdamW step of lr 1e-3: each within 1e-3 + roundoff of the fixture's
  double moved = 0;
  for (const auto& [name, w] : hf) {
    if (!ours.count(name)) continue;
    auto a = ours.at(name).to_double(), b = w.to_double();
    for (size_t i = 0; i < a.size(); ++i) {
      moved = std::max(moved, std::fabs(a[i] - b[i]));
      ASSERT_LT(std::fabs(a[i] - b[i]), 1.01e-3) << name << "[" << i << "]";
    }
  }
  EXPECT_GT(moved, 5e-4) << "the checkpoint holds the initial weights, not the trained ones";
  const auto mine = runtime::read_json_file(dir + "/config.json"), theirs = runtime::read_json_file(kDir + "/config.json");
  EXPECT_EQ(mine.at("model_type"), "llama");
  EXPECT_EQ(mine.at("architectures"), nlohmann::json::array({"LlamaForCausalLM"}));
  for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "vocab_size", "max_position_embeddings", "tie_word_embeddings"})
    EXPECT_EQ(mine.at(k), theirs.at(k)) << k;
  const models::DecoderSpec a = models::llama_spec(mine, "ours"), b = models::llama_spec(theirs, "theirs");
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.head_dim, b.head_dim);
  std::filesystem::remove_all(cfg.checkpoint_dir);
}

}  // namespace
}  // namespace st
