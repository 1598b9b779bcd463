// runtime/generate/generation: the KV cache against recomputing the whole sequence (same tokens,
// logits within roundoff), a batch of prompts of different lengths against each prompt alone
// (bit for bit), the HF fixture's greedy continuation from transformers' generate, the nucleus
// cut, the stop token, the cache's bytes and the prompt errors.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "ops/elementwise.h"
#include "runtime/common/json_io.h"
#include "runtime/generate/generation.h"
#include "runtime/generate/sampler.h"
#include "tensor/autograd.h"

using namespace st;
using namespace st::runtime;

namespace {

const std::string kFixture = ST_FIXTURE_DIR;

// A random GPT of 3 layers (vocab 97, context 48), weights normal(0, 0.02·k): k = 8 so the
// logits are far from uniform and greedy choices are not near-ties.
std::shared_ptr<models::Gpt> random_gpt() {
  models::GptConfig c;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 4;
  c.vocab_size = 97;
  c.n_positions = 48;
  auto m = std::make_shared<models::Gpt>(c, std::make_shared<Generator>(1));
  m->init_weights(7);
  NoGradGuard ng;
  for (auto& [n, p] : m->named_parameters())
    if (n.find("ln_") == std::string::npos) p.detach().copy_(ops::scale(p.detach(), 8.0));
  m->eval();
  return m;
}

std::vector<std::vector<int64_t>> prompts() {
  return {{5, 17, 3, 88, 42, 9, 1}, {60}, {11, 12, 13, 14}, {96, 0, 50, 25, 75, 33, 44, 55, 66, 77, 2}};
}

GenerationOptions greedy(int64_t n, bool cache) {
  GenerationOptions o;
  o.max_new_tokens = n;
  o.use_cache = cache;
  o.keep_logits = true;
  return o;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

}  // namespace

TEST(Generation, CacheGivesTheTokensAndLogitsOfRecomputing) {
  auto m = random_gpt();
  const auto P = prompts();
  GenerationResult with = generate_tokens(*m, P, greedy(30, true), Device::cpu);
  GenerationResult without = generate_tokens(*m, P, greedy(30, false), Device::cpu);
  ASSERT_EQ(with.tokens, without.tokens);
  for (size_t r = 0; r < P.size(); ++r) {
    ASSERT_EQ(with.tokens[r].size(), 30u);
    // The same function in another summation order (q·Kᵀ over the cache vs the causal kernel's
    // blocks; f32, |logits| ≲ 10, 3 layers): roundoff is ~1e-6; 1e-4 is well above it and far
    // below the effect of one wrong cached position (≥ 1e-2 here, checked by breaking the cache).
    for (size_t i = 0; i < with.logits[r].size(); ++i)
      EXPECT_LT(max_abs_diff(with.logits[r][i], without.logits[r][i]), 1e-4) << "row " << r << " token " << i;
  }
  // And the uncached loop is the sampler's plain generate() on each prompt.
  for (size_t r = 0; r < P.size(); ++r) EXPECT_EQ(with.tokens[r], generate(*m, P[r], 30, 0.0, 0, 1)) << r;
}

TEST(Generation, ABatchEqualsEachPromptAlone) {
  auto m = random_gpt();
  const auto P = prompts();
  GenerationOptions o = greedy(25, true);
  GenerationResult batch = generate_tokens(*m, P, o, Device::cpu);
  for (size_t r = 0; r < P.size(); ++r) {
    GenerationResult alone = generate_tokens(*m, {P[r]}, o, Device::cpu);
    EXPECT_EQ(batch.tokens[r], alone.tokens[0]) << "prompt " << r;
    // Padding keys get exactly zero weight and positions are the row's own, so only roundoff
    // differs: the linear layers' GEMMs block B·T rows differently from T (measured ≤ 2e-6 here);
    // 1e-4 as above.
    for (size_t i = 0; i < alone.logits[0].size(); ++i)
      EXPECT_LT(max_abs_diff(batch.logits[r][i], alone.logits[0][i]), 1e-4) << "prompt " << r << " token " << i;
  }
  // Sampled too: row r draws from seed + r, alone or in the batch.
  o.temperature = 1.0;
  o.top_k = 20;
  o.top_p = 0.9;
  o.seed = 11;
  GenerationResult sb = generate_tokens(*m, P, o, Device::cpu);
  GenerationOptions o2 = o;
  o2.seed = 11 + 2;
  EXPECT_EQ(sb.tokens[2], generate_tokens(*m, {P[2]}, o2, Device::cpu).tokens[0]);
}

TEST(Generation, ReproducesTransformersGreedyOnTheFixture) {
  auto model = load_model_for_sampling(kFixture);
  const nlohmann::json g = read_json_file(kFixture + "/reference.json").at("greedy");
  const auto prompt = g.at("prompt").get<std::vector<int64_t>>();
  const auto want = g.at("tokens").get<std::vector<int64_t>>();
  std::vector<GenerationResult> r;
  for (bool cache : {true, false}) {
    r.push_back(generate_tokens(*model, {prompt}, greedy(static_cast<int64_t>(want.size()), cache), Device::cpu));
    EXPECT_EQ(r.back().tokens[0], want) << (cache ? "with" : "without") << " the cache";
  }
  // The continuation repeats one token, which a wrong cache could still produce: the logits of
  // every step must also be the recomputed ones (1e-4 as above).
  ASSERT_EQ(r[0].logits[0].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(max_abs_diff(r[0].logits[0][i], r[1].logits[0][i]), 1e-4) << i;
}

TEST(Generation, CacheBytesAreKAndVOfEveryLayer) {
  auto m = random_gpt();
  GenerationResult r = generate_tokens(*m, prompts(), greedy(5, true), Device::cpu);
  // 2 (K, V) · 3 layers · B 4 · H 4 · capacity (11 + 5) · D 8 · 4 bytes
  EXPECT_EQ(r.cache_bytes, 2 * 3 * 4 * 4 * 16 * 8 * 4);
  // The cache stops at the context: a 45-token prompt gets 3 new tokens of a 48-position model.
  std::vector<int64_t> longp(45, 3);
  EXPECT_EQ(generate_tokens(*m, {longp}, greedy(10, true), Device::cpu).tokens[0].size(), 3u);
  EXPECT_EQ(generate_tokens(*m, {longp}, greedy(10, false), Device::cpu).tokens[0].size(), 3u);
}

TEST(Generation, StopTokenEndsARow) {
  auto m = random_gpt();
  const auto P = prompts();
  GenerationResult free = generate_tokens(*m, P, greedy(20, true), Device::cpu);
  GenerationOptions o = greedy(20, true);
  o.stop_token = free.tokens[0][4];  // row 0's fifth token
  GenerationResult stopped = generate_tokens(*m, P, o, Device::cpu);
  size_t first = 0;
  while (free.tokens[0][first] != o.stop_token) ++first;
  EXPECT_EQ(stopped.tokens[0], std::vector<int64_t>(free.tokens[0].begin(), free.tokens[0].begin() + first));
  for (size_t r = 1; r < P.size(); ++r) {  // the other rows run until their own stop or the end
    std::vector<int64_t> want;
    for (int64_t t : free.tokens[r]) {
      if (t == o.stop_token) break;
      want.push_back(t);
    }
    EXPECT_EQ(stopped.tokens[r], want) << r;
  }
}

TEST(Generation, NucleusKeepsTheSmallestPrefixReachingP) {
  // probabilities ∝ e^{2}, e^{1}, e^{0}, e^{-5}: 0.66, 0.24, 0.09, 0.0006
  const std::vector<float> logits = {0.f, 2.f, -5.f, 1.f};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(choose_token(logits, 1.0, 0, 0.5, rng), 1);  // 0.66 ≥ 0.5 alone
  int count[4] = {0, 0, 0, 0};
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[choose_token(logits, 1.0, 0, 0.8, rng)];  // ids 1 and 3: 0.66 + 0.24
  EXPECT_EQ(count[0] + count[2], 0);
  const double p1 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));  // 0.731, renormalised over the two
  EXPECT_NEAR(count[1] / static_cast<double>(n), p1, 0.01);  // 4.5σ of a binomial of 40000 draws
}

TEST(Generation, PromptErrorsNameTheProblem) {
  auto m = random_gpt();
  auto msg = [&](const std::vector<std::vector<int64_t>>& p) {
    try {
      generate_tokens(*m, p, greedy(3, true), Device::cpu);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({{1, 2}, {}}).find("prompt 1 is empty"), std::string::npos);
  EXPECT_NE(msg({std::vector<int64_t>(49, 1)}).find("prompt 0 is 49 tokens, longer than the model's context of 48"),
            std::string::npos);
  EXPECT_NE(msg({{1, 97}}).find("token id 97, outside the model's vocabulary of 97"), std::string::npos);
}
