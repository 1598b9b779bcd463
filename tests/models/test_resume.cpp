// Checkpoints and --resume: a run saved at step 2 and resumed to step 5 equals an uninterrupted
// run bit for bit (losses, grad norms, weights), in fp32 and fp16 (loss-scaler state) for the
// HF GPT, and for a SimpleTransformer with dropout 0.1 (the dropout generator's offset).
// Also: retention (keep last N), the checkpoint's GPT loads back as an HF directory, and
// --resume without a checkpoint starts from scratch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/hf_gpt2.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/io/safetensors.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/autograd.h"
#include "train_helpers.h"

namespace st {
namespace {

using runtime::OptimizerKind;
using runtime::Precision;
using testing::reference_config;
using testing::temp_dir;

struct Run {
  std::vector<runtime::StepMetrics> steps;
  std::vector<std::vector<double>> weights;  // f32 masters, in order
  std::vector<std::vector<double>> opt_state;
};

Run finish(runtime::Trainer& t, int64_t to) {
  Run r;
  while (t.step() < to) r.steps.push_back(t.train_step());
  for (size_t i = 0; i < t.optimizer().size(); ++i) r.weights.push_back(t.optimizer().master(i).to_double());
  for (auto& [n, s] : t.optimizer().state_dict()) r.opt_state.push_back(s.to_double());
  return r;
}

void expect_resume_bit_exact(runtime::TrainConfig cfg, const std::string& name) {
  const int64_t total = cfg.steps;
  Run full;
  {
    runtime::Trainer t(cfg);
    full = finish(t, total);
  }
  cfg.checkpoint_dir = temp_dir(name);
  cfg.checkpoint_every = 2;
  {
    auto first = cfg;
    first.steps = 2;
    runtime::Trainer t(first);
    t.run();  // saves step 2 (checkpoint_every and the end)
  }
  ASSERT_EQ(runtime::CheckpointDir(cfg.checkpoint_dir).complete_steps(), std::vector<int64_t>{2});
  cfg.resume = true;
  runtime::Trainer t(cfg);
  EXPECT_EQ(t.step(), 2);
  EXPECT_FALSE(t.resumed_from().empty());
  Run resumed = finish(t, total);
  ASSERT_EQ(resumed.steps.size(), static_cast<size_t>(total - 2));
  for (size_t k = 0; k < resumed.steps.size(); ++k) {
    const auto& a = full.steps[k + 2];
    const auto& b = resumed.steps[k];
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.loss, b.loss) << name << " step " << a.step;  // bit-exact
    EXPECT_EQ(a.grad_norm, b.grad_norm) << name << " step " << a.step;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << name << " step " << a.step;
  }
  EXPECT_EQ(full.weights, resumed.weights) << name;
  EXPECT_EQ(full.opt_state, resumed.opt_state) << name;
  std::filesystem::remove_all(cfg.checkpoint_dir);
}

TEST(Resume, GptFp32IsBitExact) { expect_resume_bit_exact(reference_config(), "resume_fp32"); }

TEST(Resume, GptFp16IsBitExact) {
  auto cfg = reference_config();
  cfg.precision = Precision::fp16;
  expect_resume_bit_exact(cfg, "resume_fp16");
}

TEST(Resume, GptBf16IsBitExact) {
  auto cfg = reference_config();
  cfg.precision = Precision::bf16;
  cfg.optimizer = OptimizerKind::sgd;  // and the other optimizer's state
  cfg.lr = 0.05;
  expect_resume_bit_exact(cfg, "resume_bf16");
}

// A token file whose next token is a function of the current one (period 16).
std::string pattern_tokens(const std::string& dir, int64_t vocab, int64_t n) {
  std::vector<uint16_t> perm;
  for (int64_t i = 0; i < 16; ++i) perm.push_back(static_cast<uint16_t>((i * 37 + 5) % vocab));
  std::vector<uint16_t> toks;
  for (int64_t i = 0; i < n; ++i) toks.push_back(perm[i % 16]);
  std::string path = dir + "/pattern.bin";
  runtime::write_token_file(path, toks);
  return path;
}

TEST(Resume, SimpleTransformerWithDropoutIsBitExact) {
  std::string data_dir = temp_dir("resume_st_data");
  runtime::TrainConfig cfg;
  cfg.model = "simple-transformer";
  cfg.layers = 2;
  cfg.d_model = 32;
  cfg.heads = 4;
  cfg.vocab = 64;
  cfg.seq_len = 16;
  cfg.micro_batch = 2;
  cfg.grad_accum = 2;
  cfg.data = pattern_tokens(data_dir, 64, 4096);
  cfg.steps = 5;
  cfg.log_every = 0;
  cfg.lr = 3e-3;
  cfg.weight_decay = 0.1;
  {
    runtime::Trainer t(cfg);
    ASSERT_TRUE(t.model().generator());
    // dropout 0.1 is on: the training loss differs from the eval-mode loss of the same weights on
    // the same batch (masks come from the step's dropout context, not from the generator's offset)
    runtime::TokenData data(cfg.data);
    runtime::TokenBatch b = data.sequences(0, 4, 0, 2, 16);  // step 0, global batch 4: sequences 0, 1
    double train_loss, eval_loss;
    {
      st::NoGradGuard ng;
      runtime::DropoutScope scope(0, 0);
      train_loss = t.model().loss(t.model().forward(b.inputs), b.targets).item();
      t.model().eval();
      eval_loss = t.model().loss(t.model().forward(b.inputs), b.targets).item();
      t.model().train();
    }
    EXPECT_NE(train_loss, eval_loss);
    EXPECT_EQ(t.model().generator()->offset(), 0u);
  }
  expect_resume_bit_exact(cfg, "resume_st");
  std::filesystem::remove_all(data_dir);
}

TEST(Resume, KeepsTheLastNAndWritesAnHfDirectory) {
  auto cfg = reference_config();
  cfg.checkpoint_dir = temp_dir("keep");
  cfg.checkpoint_every = 1;
  cfg.keep_checkpoints = 2;
  runtime::Trainer t(cfg);
  t.run();
  runtime::CheckpointDir dir(cfg.checkpoint_dir);
  EXPECT_EQ(dir.complete_steps(), (std::vector<int64_t>{4, 5}));
  // The newest step directory is a transformers-loadable GPT-2: config.json + model.safetensors
  // with exactly the fixture's names, shapes and dtype (F32), and it loads back into our GPT.
  std::string last = dir.latest();
  auto ours = runtime::read_safetensors(last + "/model.safetensors");
  auto hf = runtime::read_safetensors(testing::fixture_dir() + "/model.safetensors");
  std::map<std::string, Shape> a, b;
  for (auto& [n, x] : ours.tensors) {
    a[n] = x.shape();
    EXPECT_EQ(x.dtype(), DType::f32) << n;
  }
  for (auto& [n, x] : hf.tensors) b[n] = x.shape();
  EXPECT_EQ(a, b);
  EXPECT_EQ(ours.metadata.at("format"), "pt");
  auto back = models::load_hf_gpt2(last, std::make_shared<Generator>(0));
  for (auto& [n, p] : back->named_parameters()) {
    auto it = std::find_if(ours.tensors.begin(), ours.tensors.end(), [&](auto& kv) { return kv.first == n; });
    ASSERT_NE(it, ours.tensors.end()) << n;
    EXPECT_EQ(p.to_double(), it->second.to_double()) << n;
  }
  // the final weights differ from the initial ones (training happened)
  auto init = runtime::load_safetensors(testing::fixture_dir() + "/model.safetensors");
  EXPECT_NE(init.at("transformer.h.0.attn.c_attn.weight").to_double(),
            back->parameter("transformer.h.0.attn.c_attn.weight").to_double());
  std::filesystem::remove_all(cfg.checkpoint_dir);
}

TEST(Resume, WithoutACheckpointStartsFromScratch) {
  auto cfg = reference_config();
  cfg.checkpoint_dir = temp_dir("empty");
  cfg.resume = true;
  runtime::Trainer t(cfg);
  EXPECT_EQ(t.step(), 0);
  EXPECT_TRUE(t.resumed_from().empty());
  std::filesystem::remove_all(cfg.checkpoint_dir);
}

TEST(Resume, RejectsAnotherGlobalBatch) {
  auto cfg = reference_config();
  cfg.checkpoint_dir = temp_dir("batch");
  cfg.steps = 1;
  {
    runtime::Trainer t(cfg);
    t.run();
  }
  cfg.resume = true;
  cfg.micro_batch = 2;  // G 2 instead of 4: the data order would change
  try {
    runtime::Trainer t(cfg);
    FAIL() << "resume with another global batch was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("global batch 4"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(cfg.checkpoint_dir);
}

}  // namespace
}  // namespace st
