// Llama's KV-cache path (DecoderBlock::forward_cached → runtime/nn/cached_attention.h: grouped-query
// heads, q and k rotated by each row's positions, the cache holding key/value heads only) against
// the full forward, greedy, token for token: in one process (every rank runs it), under tp 2 (a
// key/value head per rank) and pp 2 (one and two micro-batches), and the HF fixture's greedy
// continuation (tests/fixtures/hf_llama_tiny, transformers' generate) in one process and under
// tp 2 and pp 2. Registered at np 2.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "comm/process_grid.h"
#include "models/llama.h"
#include "ops/elementwise.h"
#include "runtime/common/json_io.h"
#include "runtime/common/partition.h"
#include "runtime/generate/generation.h"
#include "runtime/generate/sampler.h"
#include "runtime/setup/model_registry.h"
#include "tensor/autograd.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;

namespace {

const std::string kFixture = ST_LLAMA_FIXTURE_DIR;

// 3 blocks, C 32, 4 query heads over 2 key/value heads (head_dim 8), SwiGLU 48, V 97, context 48,
// rope theta 500000, an untied head.
nlohmann::json llama_entry() {
  models::LlamaSizes s;
  s.layers = 3;
  s.d_model = 32;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 48;
  s.vocab = 97;
  s.context = 48;
  s.rope_theta = 500000;
  s.tied = false;
  return {{"family", "llama"}, {"config", models::llama_hf_config(s)}};
}

// Weights by name (the same numbers in every layout), ×8 off the RMSNorms so the logits are far
// from uniform and greedy choices are not near-ties (as test_generation.cpp does for the GPT).
void fill(LanguageModel& m) {
  m.init_weights(7);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters())
    if (n.find("norm") == std::string::npos) p.detach().copy_(ops::scale(p.detach(), 8.0));
  m.eval();
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

struct Layout {
  int tp, pp;
  int64_t micro_batches;
};
const std::vector<Layout> kLayouts = {{2, 1, 1}, {1, 2, 1}, {1, 2, 2}};

ModelBuild build_for(const comm::ProcessGrid& g, const Layout& l, int total_layers) {
  ModelBuild b;
  b.tp = l.tp > 1 ? g.tp_group() : nullptr;
  if (l.pp > 1) {
    const Partition part = partition_uniform(total_layers, l.pp);
    b.layers = {LayerRange{part.begin(g.coord().pp), part.end(g.coord().pp)}};
  }
  return b;
}

GenerationResult run(LanguageModel& m, const comm::ProcessGrid& g, const Layout& l,
                     const std::vector<std::vector<int64_t>>& p, GenerationOptions o) {
  o.micro_batches = l.micro_batches;
  if (l.pp > 1) return generate_pipelined(m, g.pp_group(), m.config_json().at("hidden_size").get<int64_t>(), p, o, Device::cpu);
  return generate_tokens(m, p, o, Device::cpu);
}

std::string name(const Layout& l) {
  return "tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " micro-batches " + std::to_string(l.micro_batches);
}

}  // namespace

// One process: the cached path against recomputing the whole sequence each token. The same
// function in another summation order (q·Kᵀ over the cache vs the causal kernel's blocks, f32,
// |logits| ≲ 10): roundoff ~1e-6; 1e-4 is far below a wrong cached position's or a wrong rotation's
// effect (≥ 1e-2). The cache holds key/value heads only: 2 · layers · Hkv · D · 4 bytes per position.
TEST(LlamaGeneration, CacheEqualsTheFullForward) {
  auto m = build_model_from_json(llama_entry());
  fill(*m);
  const auto P = prompts();
  GenerationResult with = generate_tokens(*m, P, greedy(30, true), Device::cpu);
  GenerationResult without = generate_tokens(*m, P, greedy(30, false), Device::cpu);
  ASSERT_EQ(with.tokens, without.tokens);
  for (size_t r = 0; r < P.size(); ++r) {
    ASSERT_EQ(with.tokens[r].size(), 30u);
    for (size_t i = 0; i < with.logits[r].size(); ++i)
      EXPECT_LT(max_abs_diff(with.logits[r][i], without.logits[r][i]), 1e-4) << "row " << r << " token " << i;
  }
  // the grouped-query cache: (B, Hkv, S, D) keys and values per layer, S ≥ the longest row
  const int64_t per_position = 2 * 3 * 2 * 8 * 4, rows = static_cast<int64_t>(P.size()), longest = 11 + 30;
  EXPECT_GE(with.cache_bytes, rows * longest * per_position);
  EXPECT_LT(with.cache_bytes, rows * 48 * per_position + 1) << "more than key/value heads cached";
}

// tp 2 (one key/value head per rank) and pp 2 against one process: the same tokens on every rank,
// logits within 1e-4 (tp sums the attention and MLP outputs in another order: roundoff ~1e-6).
TEST(LlamaGeneration, TensorAndPipelineParallelGiveTheOneProcessTokens) {
  auto world = tptest::world();
  ASSERT_EQ(world->size(), 2) << "registered at np 2";
  auto full = build_model_from_json(llama_entry());
  fill(*full);
  const auto P = prompts();
  const GenerationResult want = generate_tokens(*full, P, greedy(20, true), Device::cpu);
  for (const Layout& l : kLayouts) {
    comm::ProcessGrid g(world, 1, l.tp, l.pp);
    auto m = build_model_from_json(llama_entry(), build_for(g, l, full->total_layers()));
    fill(*m);
    GenerationResult got = run(*m, g, l, P, greedy(20, true));
    const std::string what = name(l) + ", rank " + std::to_string(world->rank());
    EXPECT_EQ(got.tokens, want.tokens) << what;
    Tensor t = Tensor::from_vector(std::vector<int64_t>{got.cache_bytes}, {1});
    world->all_reduce(t)->wait();
    EXPECT_EQ(static_cast<int64_t>(t.item()), want.cache_bytes) << what << ": the cache splits over the ranks";
    if (!m->holds_last()) continue;
    for (size_t r = 0; r < P.size(); ++r)
      for (size_t i = 0; i < want.logits[r].size(); ++i)
        EXPECT_LT(max_abs_diff(got.logits[r][i], want.logits[r][i]), 1e-4) << what << " row " << r << " token " << i;
  }
}

// transformers' greedy generate on the fixture (tests/fixtures/make_hf_llama_tiny.py): the same
// tokens with and without the cache in one process, and under tp 2 and pp 2.
TEST(LlamaGeneration, FixtureContinuesAsTransformers) {
  auto world = tptest::world();
  const nlohmann::json g = read_json_file(kFixture + "/reference.json").at("greedy");
  const auto prompt = g.at("prompt").get<std::vector<int64_t>>();
  const auto want = g.at("tokens").get<std::vector<int64_t>>();
  ASSERT_GE(want.size(), 16u);
  auto one = load_model_for_sampling(kFixture);
  for (bool cache : {true, false})
    EXPECT_EQ(generate_tokens(*one, {prompt}, greedy(static_cast<int64_t>(want.size()), cache), Device::cpu).tokens[0], want)
        << (cache ? "with" : "without") << " the cache";
  for (const Layout& l : kLayouts) {
    comm::ProcessGrid grid(world, 1, l.tp, l.pp);
    auto m = load_model_for_sampling(kFixture, nullptr, build_for(grid, l, one->total_layers()));
    EXPECT_EQ(run(*m, grid, l, {prompt}, greedy(static_cast<int64_t>(want.size()), true)).tokens[0], want) << name(l);
  }
}
