// Stages of several chunks (interleaved 1F1B's layout): which pieces a stage holds, which weights
// are tied across stages (by stage, not by chunk: two uses on one stage are one tensor), the
// recompute rule mapped through the chunks, and the chunks of stage-only builds run in model order
// giving exactly the whole model's logits. A GPT of 2 blocks (4 layers: embedding, 2 blocks,
// head), C 32, V 64, T 8.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "runtime/pipeline/stage_model.h"
#include "runtime/setup/model_registry.h"
#include "tensor/autograd.h"

using namespace st;
using namespace st::runtime;

namespace {

TrainConfig gpt(int64_t blocks) {
  TrainConfig cfg;
  cfg.model = "gpt";
  cfg.layers = blocks;
  cfg.d_model = 32;
  cfg.heads = 4;
  cfg.vocab = 64;
  cfg.seq_len = 8;
  cfg.seed = 3;
  return cfg;
}

ModelDescription describe(const TrainConfig& cfg) { return describe_model(model_entry(cfg), cfg.seq_len); }

// A stage built with only these chunks.
StageModel stage(const TrainConfig& cfg, std::vector<LayerRange> chunks) {
  return StageModel(build_model(cfg, std::move(chunks)));
}

}  // namespace

TEST(StageModel, ChunksFollowMegatronsLayout) {
  const Partition pieces = partition_uniform(8, 4);  // layers 0-1 | 2-3 | 4-5 | 6-7
  EXPECT_EQ(stage_chunks(pieces, 0, 2), (std::vector<LayerRange>{{0, 2}, {4, 6}}));
  EXPECT_EQ(stage_chunks(pieces, 1, 2), (std::vector<LayerRange>{{2, 4}, {6, 8}}));
  EXPECT_EQ(stage_chunks(pieces, 3, 4), (std::vector<LayerRange>{{6, 8}}));  // one chunk per stage
  EXPECT_THROW(stage_chunks(pieces, 0, 3), ValueError);  // 4 pieces do not spread over 3 stages
}

TEST(StageModel, TiedWeightsAreFoundByStage) {
  const TrainConfig cfg = gpt(2);
  const Partition pieces = partition_uniform(4, 4);  // one layer each
  // 2 stages of 2 chunks: the embedding (piece 0) on stage 0, the head (piece 3) on stage 1
  auto two = tied_across_stages(describe(cfg), pieces, 2);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_NE(two[0].name.find("wte"), std::string::npos) << two[0].name;
  EXPECT_EQ(two[0].stages, (std::vector<int>{0, 1}));
  EXPECT_EQ(tied_across_stages(describe(cfg), pieces, 4)[0].stages, (std::vector<int>{0, 3}));
  // every piece on one stage: both uses on the same stage are not tied across stages, and that
  // stage built them as one tensor, listed once
  EXPECT_TRUE(tied_across_stages(describe(cfg), pieces, 1).empty());
  StageModel ends = stage(cfg, {{0, 1}, {3, 4}});
  std::set<std::string> names;
  for (auto& [name, p] : ends.named_parameters()) EXPECT_TRUE(names.insert(name).second) << name << " twice";
  EXPECT_TRUE(names.count(two[0].name));
  // the embedding's and the head's wte are the same storage
  auto& emb = *ends.layers().front();
  auto& head = *ends.layers().back();
  EXPECT_EQ(emb.parameter("wte.weight").data_ptr(), head.parameter("wte.weight").data_ptr());
}

TEST(StageModel, RecomputeRuleFollowsTheFullModelsIndex) {
  const TrainConfig cfg = gpt(2);
  StageModel s = stage(cfg, {{1, 2}, {3, 4}});  // block 0, then the head
  EXPECT_TRUE(s.recomputable(0));         // a block
  EXPECT_FALSE(s.recomputable(1));        // the model's last layer, not local layer 1's neighbour
  EXPECT_TRUE(s.is_last());
  EXPECT_FALSE(s.is_first());
  EXPECT_THROW(stage(cfg, {{2, 3}, {1, 2}}), ValueError);  // out of order
  EXPECT_THROW(stage(cfg, {{0, 2}, {1, 3}}), ValueError);  // overlapping
}

TEST(StageModel, ChunksInModelOrderAreTheWholeModel) {
  const TrainConfig cfg = gpt(2);
  auto full = build_model(cfg);
  full->eval();  // no dropout (the GPT's default is 0 anyway)
  const Partition pieces = partition_uniform(4, 4);
  // each stage built alone from the seed: its weights are the whole model's (init by name)
  StageModel s0 = stage(cfg, stage_chunks(pieces, 0, 2)), s1 = stage(cfg, stage_chunks(pieces, 1, 2));
  s0.eval();
  s1.eval();
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 63, 0, 7, 7, 3, 4, 5, 6, 1, 2, 3, 4}, {2, 8});
  NoGradGuard ng;
  Tensor want = full->forward(ids);
  Tensor x = s0.forward_chunk(ids, 0);  // model chunk 0 (stage 0), 1 (stage 1), 2 (stage 0), 3 (stage 1)
  x = s1.forward_chunk(x, 0);
  x = s0.forward_chunk(x, 1);
  x = s1.forward_chunk(x, 1);
  ASSERT_EQ(x.shape(), want.shape());
  const auto a = x.to_double(), b = want.to_double();
  EXPECT_EQ(a, b);  // the same layers in the same order: bit-identical
}
