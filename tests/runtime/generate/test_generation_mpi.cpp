// Model-parallel generation (runtime/generate/generation.h) against one process: tensor parallel
// (heads and the KV cache split), pipelines (each stage builds only its layers; micro-batches
// overlapping across stages) and both, give the one-process greedy tokens for a batch of prompts
// of different lengths, and logits within roundoff; the HF fixture's transformers continuation
// too. Registered also under SHARDTRAIN_P2P=strict (NCCL's rendezvous rules: no deadlock).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "comm/process_grid.h"
#include "models/gpt.h"
#include "ops/elementwise.h"
#include "runtime/common/json_io.h"
#include "runtime/common/partition.h"
#include "runtime/generate/generation.h"
#include "runtime/setup/model_registry.h"
#include "runtime/generate/sampler.h"
#include "tensor/autograd.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;

namespace {

const std::string kFixture = ST_FIXTURE_DIR;

nlohmann::json gpt_entry() {
  models::GptConfig c;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 4;
  c.vocab_size = 97;
  c.n_positions = 48;
  return {{"family", "gpt"}, {"config", models::gpt_hf_config_json(c)}};
}

// Weights by name (the same numbers in every layout), ×8 off the LayerNorms so greedy choices
// are not near-ties (as in test_generation.cpp).
void fill(LanguageModel& m) {
  m.init_weights(7);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters())
    if (n.find("ln_") == std::string::npos) p.detach().copy_(ops::scale(p.detach(), 8.0));
  m.eval();
}

std::vector<std::vector<int64_t>> prompts() {
  return {{5, 17, 3, 88, 42, 9, 1}, {60}, {11, 12, 13, 14}, {96, 0, 50, 25, 75, 33, 44, 55, 66, 77, 2}, {7, 7}};
}

struct Layout {
  int tp, pp;
  int64_t micro_batches;
};

// This rank's part of the layout's model: its stage's layers (uniform cut), its tp shard.
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
  if (l.pp > 1) return generate_pipelined(m, g.pp_group(), m.config_json().at("n_embd").get<int64_t>(), p, o, Device::cpu);
  return generate_tokens(m, p, o, Device::cpu);
}

std::vector<Layout> layouts(int world) {
  if (world == 2) return {{2, 1, 1}, {1, 2, 1}, {1, 2, 2}, {1, 2, 5}};
  if (world == 4) return {{2, 2, 2}, {2, 2, 3}, {1, 4, 2}, {4, 1, 1}};
  return {};
}

}  // namespace

TEST(GenerationMpi, LayoutsGiveTheOneProcessTokens) {
  auto world = tptest::world();
  auto full = build_model_from_json(gpt_entry());
  fill(*full);
  GenerationOptions o;
  o.max_new_tokens = 20;
  o.keep_logits = true;
  const auto P = prompts();
  const GenerationResult want = generate_tokens(*full, P, o, Device::cpu);
  for (const Layout& l : layouts(world->size())) {
    comm::ProcessGrid g(world, 1, l.tp, l.pp);
    auto m = build_model_from_json(gpt_entry(), build_for(g, l, full->total_layers()));
    fill(*m);
    GenerationResult got = run(*m, g, l, P, o);
    const std::string what = "tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " micro-batches " +
                             std::to_string(l.micro_batches) + ", rank " + std::to_string(world->rank());
    EXPECT_EQ(got.tokens, want.tokens) << what;  // every rank knows every token
    // The cache splits over the ranks: together they hold the one-process cache's bytes.
    Tensor t = Tensor::from_vector(std::vector<int64_t>{got.cache_bytes}, {1});
    world->all_reduce(t)->wait();
    const int64_t total = static_cast<int64_t>(t.item());
    EXPECT_EQ(total, want.cache_bytes) << what;
    if (!m->holds_last()) continue;
    // tp sums the attention and MLP outputs over ranks in another order: roundoff ~1e-6 on
    // logits of magnitude ≲ 10; 1e-4 is far below a wrong position's effect (test_generation.cpp).
    for (size_t r = 0; r < P.size(); ++r)
      for (size_t i = 0; i < want.logits[r].size(); ++i) {
        double d = 0;
        for (size_t v = 0; v < want.logits[r][i].size(); ++v)
          d = std::max(d, std::fabs(static_cast<double>(got.logits[r][i][v]) - want.logits[r][i][v]));
        EXPECT_LT(d, 1e-4) << what << " row " << r << " token " << i;
      }
  }
}

TEST(GenerationMpi, FixtureContinuesAsTransformersUnderTpAndPp) {
  auto world = tptest::world();
  const nlohmann::json g = read_json_file(kFixture + "/reference.json").at("greedy");
  const auto prompt = g.at("prompt").get<std::vector<int64_t>>();
  const auto want = g.at("tokens").get<std::vector<int64_t>>();
  GenerationOptions o;
  o.max_new_tokens = static_cast<int64_t>(want.size());
  for (const Layout& l : layouts(world->size())) {
    if (l.tp > 4) continue;
    comm::ProcessGrid grid(world, 1, l.tp, l.pp);
    auto m = load_model_for_sampling(kFixture, nullptr, build_for(grid, l, 4));  // 2 blocks + embedding + head
    EXPECT_EQ(run(*m, grid, l, {prompt}, o).tokens[0], want) << "tp " << l.tp << " pp " << l.pp;
  }
}
