// runtime/generate/sampler: loads the HF GPT-2 fixture and our checkpoint layout; greedy decoding is the
// argmax of the reference logits (HF transformers' first-batch logits) and is deterministic;
// temperature / top-k draws follow the softmax probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/generate/sampler.h"

namespace fs = std::filesystem;
using namespace st;
using namespace st::runtime;

namespace {

const std::string kFixture = ST_FIXTURE_DIR;

// The fixture's token stream (llm.c .bin: 256 int32 header, then uint16 tokens).
std::vector<int64_t> fixture_tokens() {
  std::ifstream f(kFixture + "/tokens.bin", std::ios::binary);
  std::vector<int32_t> header(256);
  f.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  std::vector<uint16_t> t(header[2]);
  f.read(reinterpret_cast<char*>(t.data()), 2 * t.size());
  return std::vector<int64_t>(t.begin(), t.end());
}

}  // namespace

TEST(Sampler, GreedyIsTheArgmaxOfTheReferenceLogits) {
  auto model = load_model_for_sampling(kFixture);
  ASSERT_EQ(model->vocab_size(), 256);
  ASSERT_EQ(model->context_length(), 32);
  auto tokens = fixture_tokens();
  Tensor logits = load_safetensors(kFixture + "/logits0.safetensors").at("logits");  // (B, T, V)
  ASSERT_EQ(logits.dim(), 3);
  const int64_t T = logits.size(1), V = logits.size(2);
  std::vector<float> all = logits.to_float();
  // Row 0 of the first batch is tokens[0 : T]; causal attention makes the logits at position
  // p depend only on tokens[0 : p+1], so the greedy choice after a prompt of p+1 tokens is
  // the argmax of the reference logits at p.
  for (int64_t p : {0L, 7L, 15L, T - 1}) {
    std::vector<int64_t> prompt(tokens.begin(), tokens.begin() + p + 1);
    auto g = generate(*model, prompt, 1, 0.0, 0, 1);
    const float* row = all.data() + p * V;
    int64_t ref = std::max_element(row, row + V) - row;
    EXPECT_EQ(g.at(0), ref) << "prompt of " << p + 1 << " tokens";
  }
}

TEST(Sampler, GreedyIsDeterministicAndChains) {
  auto model = load_model_for_sampling(kFixture);
  auto tokens = fixture_tokens();
  std::vector<int64_t> prompt(tokens.begin(), tokens.begin() + 10);
  // 40 tokens: the window slides past the context of 32.
  auto a = generate(*model, prompt, 40, 0.0, 0, 1);
  auto b = generate(*model, prompt, 40, 0.0, 0, 999);  // the seed does not matter when greedy
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 40u);
  // Greedy continuation of prompt + a[0] is a[1:].
  std::vector<int64_t> p2 = prompt;
  p2.push_back(a[0]);
  auto c = generate(*model, p2, 5, 0.0, 0, 1);
  EXPECT_EQ(c, std::vector<int64_t>(a.begin() + 1, a.begin() + 6));
}

TEST(Sampler, SeededSamplingRepeatsAndDiffers) {
  auto model = load_model_for_sampling(kFixture);
  std::vector<int64_t> prompt = {'T', 'h', 'e'};
  auto a = generate(*model, prompt, 30, 1.0, 0, 7);
  auto b = generate(*model, prompt, 30, 1.0, 0, 7);
  auto c = generate(*model, prompt, 30, 1.0, 0, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // an untrained 256-way model: 30 equal draws would be astronomically unlikely
}

TEST(Sampler, PickFollowsSoftmaxAndTopK) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f), -1e30f};
  std::mt19937_64 rng(123);
  EXPECT_EQ(pick_token(logits, 0.0, 0, rng), 0);
  EXPECT_EQ(pick_token({1.f, 3.f, 3.f}, 0.0, 0, rng), 1);  // lowest index among equal maxima
  const int n = 40000;
  std::vector<int> count(4);
  for (int i = 0; i < n; ++i) ++count[pick_token(logits, 1.0, 0, rng)];
  // Binomial standard deviation at p = 0.5 is 0.0025: 4 sigma = 0.01.
  EXPECT_NEAR(count[0] / double(n), 0.5, 0.01);
  EXPECT_NEAR(count[1] / double(n), 0.3, 0.01);
  EXPECT_NEAR(count[2] / double(n), 0.2, 0.01);
  EXPECT_EQ(count[3], 0);
  // top-k 2: renormalised over {0.5, 0.3} → 0.625 / 0.375, token 2 never.
  std::fill(count.begin(), count.end(), 0);
  for (int i = 0; i < n; ++i) ++count[pick_token(logits, 1.0, 2, rng)];
  EXPECT_NEAR(count[0] / double(n), 0.625, 0.01);
  EXPECT_EQ(count[2], 0);
  // temperature 0.5 squares the probabilities: 0.25 : 0.09 : 0.04 → 0.658, 0.237, 0.105.
  std::fill(count.begin(), count.end(), 0);
  for (int i = 0; i < n; ++i) ++count[pick_token(logits, 0.5, 0, rng)];
  EXPECT_NEAR(count[0] / double(n), 0.25 / 0.38, 0.01);
  EXPECT_NEAR(count[2] / double(n), 0.04 / 0.38, 0.01);
}

TEST(Sampler, LoadsOurCheckpointLayoutFromItsParent) {
  // Our layout: ROOT/step_N/{model.safetensors, state.json with "model": {family, config}}.
  auto hf = load_model_for_sampling(kFixture);
  fs::path root = fs::temp_directory_path() / ("st_sampler_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(root);
  CheckpointDir ck(root.string());
  for (int64_t step : {3, 5}) {
    std::string tmp = ck.begin(step);
    save_safetensors(tmp + "/model.safetensors", hf->named_parameters());
    write_state(tmp, {{"step", step}, {"model", {{"family", hf->family()}, {"config", hf->config_json()}}}});
    // the rest of what a complete step holds (runtime/io/checkpoint_dir.h): config.json, optimizer state
    std::ofstream(tmp + "/config.json") << hf->config_json().dump();
    save_safetensors(tmp + "/optimizer.safetensors", {{"step", Tensor::zeros({1})}});
    ck.commit(step);
  }
  std::string from;
  auto ours = load_model_for_sampling(root.string(), &from);
  EXPECT_EQ(fs::path(from).filename(), "step_00000005");
  std::vector<int64_t> prompt = {'a', 'b', 'c'};
  EXPECT_EQ(generate(*ours, prompt, 12, 0.0, 0, 1), generate(*hf, prompt, 12, 0.0, 0, 1));
  fs::remove_all(root);
}

TEST(Sampler, ErrorsNameTheProblem) {
  fs::path d = fs::temp_directory_path() / ("st_sampler_empty_" + std::to_string(::getpid()));
  fs::create_directories(d);
  try {
    load_model_for_sampling(d.string());
    FAIL() << "expected IOError";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("step_*"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}
