// The memory check (runtime/plan/memory_check.h): each family's closed-form parameter count
// equals the built model's, exactly (integers below 2^53 in a double); the bytes per parameter
// follow the header's table (the asynchronous save's snapshot block where a run keeps one); a
// model whose parameters alone exceed the machine is refused before anything is allocated, with
// the estimate and what is available in the message.
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/plan/memory_check.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"

namespace st::runtime {
namespace {

TrainConfig sized(const std::string& model, int64_t layers, int64_t d, int64_t heads, int64_t vocab, int64_t seq) {
  TrainConfig c;
  c.model = model;
  c.layers = layers;
  c.d_model = d;
  c.heads = heads;
  c.vocab = vocab;
  c.seq_len = seq;
  return c;
}

TEST(MemoryCheck, ClosedFormParameterCountsEqualTheBuiltModels) {
  std::vector<TrainConfig> cfgs = {sized("gpt", 2, 64, 4, 256, 0),  sized("gpt", 3, 48, 6, 100, 17),
                                   sized("simple-transformer", 1, 32, 4, 50, 9), sized("simple-transformer", 2, 16, 2, 7, 0),
                                   sized("mlp", 3, 16, 1, 30, 5),     sized("mlp", 0, 8, 1, 3, 0)};
  TrainConfig hf;
  hf.init_from = ST_FIXTURE_DIR;
  cfgs.push_back(hf);
  for (const TrainConfig& c : cfgs) {
    const nlohmann::json entry = model_entry(c);
    auto model = build_model_from_json(entry);  // unfilled: only the shapes count
    const double closed = model_factory(entry["family"]).param_count(entry["config"]);
    EXPECT_EQ(closed, static_cast<double>(model->num_parameters())) << c.model << " layers " << c.layers << " d "
                                                                   << c.d_model << " " << c.init_from;
  }
}

TEST(MemoryCheck, BytesPerParameterFollowTheTable) {
  TrainConfig c = sized("gpt", 2, 64, 4, 256, 0);
  const double P = 12 * 2 * 64.0 * 64 + 13 * 2 * 64 + 64 * (256 + 64) + 2 * 64;
  MemoryEstimate e = estimate_training_memory(c, model_entry(c), 1, 1);
  EXPECT_EQ(e.params, P);
  EXPECT_EQ(e.bytes_per_param, 16);  // 4 + 4 + 8
  EXPECT_EQ(e.rank_bytes, 16 * P);
  c.precision = Precision::fp16;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 16);  // 2 + 4 master + 2 + 8
  c.optimizer = OptimizerKind::sgd;
  c.precision = Precision::bf16;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 12);  // 2 + 4 + 2 + 4
  c.precision = Precision::fp32;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 12);  // 4 + 4 + 4
  c.optimizer = OptimizerKind::adamw;
  c.zero = true;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 4).bytes_per_param, 10);  // 4 + 4 + 8/4
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 16);  // ZeRO needs dp > 1
  c.zero = 2;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 4).bytes_per_param, 7);  // 4 + 4/4 + 8/4
  c.zero = 3;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 4).bytes_per_param, 4);  // 4/4 + 4/4 + 8/4
  c.zero = 0;
  c.pp = 2;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 4, 1).rank_bytes, 16 * P / 8);  // tp 4 × pp 2
  // --async-checkpoint 1 on CUDA with AdamW and a checkpoint directory: the optimizer's snapshot
  // block, its master, m and v again (runtime/optim/optimizer.h keep_snapshot)
  c.pp = 1;
  c.async_checkpoint = true;
  c.checkpoint_dir = "ckpt";
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 16) << "the CPU keeps none";
  c.device = Device::cuda;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 28);  // 4 + 4 + 8 + 12
  c.zero = 1;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 4).bytes_per_param, 13);  // 4 + 4 + (8 + 12)/4
  c.zero = 0;
  c.checkpoint_dir.clear();
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 16) << "no saves, no block";
  c.checkpoint_dir = "ckpt";
  c.optimizer = OptimizerKind::sgd;
  EXPECT_EQ(estimate_training_memory(c, model_entry(c), 1, 1).bytes_per_param, 12) << "SGD packs at the save";
}

TEST(MemoryCheck, ThePlannerCountsTheSnapshotBlockAsTheCheckDoes) {
  // `shardtrain plan`'s optimizer term grows by the block's 12 bytes a parameter (/ dp under ZeRO),
  // the peak with it, and nothing else changes
  TrainConfig c = sized("gpt", 2, 64, 4, 256, 32);
  const double P = 12 * 2 * 64.0 * 64 + 13 * 2 * 64 + 64 * (256 + 32) + 2 * 64;
  c.device = Device::cuda;
  c.precision = Precision::bf16;
  c.checkpoint_dir = "ckpt";
  for (int zero : {0, 1}) {
    c.zero = zero;
    const int64_t dp = zero ? 4 : 1;
    c.async_checkpoint = false;
    const StageMemory without = plan_memory(model_entry(c), c.seq_len, plan_layout(c, dp)).stages.at(0);
    c.async_checkpoint = true;
    const StageMemory with = plan_memory(model_entry(c), c.seq_len, plan_layout(c, dp)).stages.at(0);
    EXPECT_DOUBLE_EQ(with.optim - without.optim, 12 * P / static_cast<double>(dp)) << "zero " << zero;
    EXPECT_DOUBLE_EQ(with.peak - without.peak, 12 * P / static_cast<double>(dp)) << "zero " << zero;
    EXPECT_EQ(with.params, without.params);
    EXPECT_EQ(with.activations, without.activations);
  }
}

TEST(MemoryCheck, RefusesAModelLargerThanTheMachineBeforeAllocating) {
  TrainConfig c = sized("gpt", 1000000000, 64, 4, 256, 0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    check_fits_in_memory(c, model_entry(c), 1, 1);
    FAIL() << "a 5e13-parameter model was not refused";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the model does not fit: 4.998e+13 parameters (gpt, layers 1000000000, d-model 64) need at "
                     "least 727.4 TiB on this rank (16 bytes per parameter"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(" available (MemAvailable in /proc/meminfo)"), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);  // nothing built
  const TrainConfig small = sized("gpt", 2, 64, 4, 256, 0);
  EXPECT_NO_THROW(check_fits_in_memory(small, model_entry(small), 1, 1));
  const AvailableMemory a = available_memory(Device::cpu);
  EXPECT_GT(a.bytes, 1 << 20);
}

}  // namespace
}  // namespace st::runtime
