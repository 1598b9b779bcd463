// Llama under every layout against one process on the same global batch (layouts_common.h: the
// property, the tolerance — the same helpers and the same measured noise multiple as the GPT's):
// dp 2, ZeRO-1, tp 2 with the grouped-query key/value heads split over tp, pp 2 under 1F1B and
// interleaved 1F1B, ZeRO-3, recompute (bit for bit in one process, the layout's curve under pp 2),
// bf16, a checkpoint written under tp 2 resumed under pp 2, and the Hugging Face fixture
// (tests/fixtures/hf_llama_tiny) under dp 2, tp 2 and pp 2. Its own binary, run at np 2 only:
// every case is a two-rank layout, and the GPT's cases already run at 2, 3, 4 (and strict p2p),
// so Llama adds one run of this file to CI (its cost: tests/runtime/train/CMakeLists.txt).
//
// The model: 4 Llama blocks (RMSNorm, rotary positions with theta 500000, SwiGLU of width 48,
// 4 query heads over 2 key/value heads, an untied head), C 32, V 64, T 16, micro-batch 2 ×
// grad-accum 2, 5 AdamW steps on layouts_common's learnable stream.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;
namespace fs = std::filesystem;

namespace {

bool two_ranks() { return world_size() == 2; }

}  // namespace

TEST(LlamaLayouts, DataParallelAndZero1EqualOneProcess) {
  ASSERT_TRUE(two_ranks()) << "registered at np 2 only";
  TrainConfig c = llama_config();
  c.dp = 2;
  const Curve want = reference(c, 2);
  expect_same(run_layout(c, "llama_dp2"), want, "llama dp 2");
  c.zero = true;
  expect_same(run_layout(c, "llama_dp2_zero1"), want, "llama dp 2 zero 1");
}

// tp 2: 4 query heads and 2 key/value heads, one key/value head (and its two query heads) per
// rank; gate/up column-parallel, down row-parallel, the vocabulary-parallel head and loss.
TEST(LlamaLayouts, TensorParallelSplitsTheKeyValueHeads) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  c.tp = 2;
  c.dp = 1;
  expect_same(run_layout(c, "llama_tp2"), reference(c, 1), "llama tp 2 (kv heads 2)");
}

// --sequence-parallel 1 under tp 2: RMSNorm and the residual stream on 8 of the 16 positions per
// rank, rotary attention on the gathered sequence (global positions); the curve of tp 2 without
// it and of one process, within the one-process noise (layouts_common.h).
TEST(LlamaLayouts, SequenceParallelEqualsTensorParallel) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  c.tp = 2;
  c.dp = 1;
  const Curve want = reference(c, 1);
  Curve tp = run_layout(c, "llama_tp2_for_sp");
  tp.loss_noise = want.loss_noise, tp.norm_noise = want.norm_noise;  // tp's curve, one process's noise
  c.sequence_parallel = 1;
  const Curve sp = run_layout(c, "llama_tp2_sp");
  expect_same(sp, tp, "llama tp 2 sequence parallel vs tp 2");
  expect_same(sp, want, "llama tp 2 sequence parallel vs one process");
}

TEST(LlamaLayouts, PipelineEqualsOneProcess) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  c.pp = 2;
  c.dp = 1;
  c.grad_accum = 4;
  c.schedule = Schedule::one_f_one_b;
  const Curve want = reference(c, 1);
  expect_same(run_layout(c, "llama_pp2_1f1b"), want, "llama pp 2 1f1b");
  c.schedule = Schedule::interleaved;  // 2 chunks per stage: 4 chunks over the 6 layers
  c.virtual_stages = 2;
  c.partition = PartitionKind::uniform;
  expect_same(run_layout(c, "llama_pp2_interleaved"), want, "llama pp 2 interleaved v 2");
}

TEST(LlamaLayouts, Zero3EqualsOneProcess) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  c.dp = 2;
  c.zero = 3;
  expect_same(run_layout(c, "llama_zero3"), reference(c, 2), "llama dp 2 zero 3");
}

// In one process the replay is the same computation (the same bits); under pp 2 the layout's curve.
TEST(LlamaLayouts, RecomputeGivesTheSameCurve) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  const Curve plain = reference(c, 1);
  TrainConfig rc = c;
  rc.recompute = true;
  const Curve one = one_process(rc);
  EXPECT_EQ(one.loss, plain.loss) << "recompute in one process changed the loss";
  EXPECT_EQ(one.grad_norm, plain.grad_norm) << "recompute in one process changed the grad norm";
  rc.pp = 2;
  rc.dp = 1;
  rc.partition = PartitionKind::uniform;
  expect_same(run_layout(rc, "llama_recompute_pp2"), plain, "llama recompute with pp 2");
}

// bf16 under dp 2: the one-process bf16 curve within its own noise (bf16 rounding of another
// summation order; measured the same way as f32's), and within 2 % of f32 (the GPT's bound).
TEST(LlamaLayouts, Bf16DataParallelEqualsOneProcess) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  const Curve f32 = reference(c, 2);
  c.precision = Precision::bf16;
  c.dp = 2;
  const Curve want = reference(c, 2);
  const Curve got = run_layout(c, "llama_bf16_dp2");
  expect_same(got, want, "llama bf16 dp 2");
  ASSERT_EQ(got.loss.size(), f32.loss.size());
  for (size_t i = 0; i < got.loss.size(); ++i)
    EXPECT_NEAR(got.loss[i], f32.loss[i], 0.02 * f32.loss[i]) << "llama bf16 vs f32, step " << i + 1;
}

// 3 steps under tp 2 (each rank writes its key/value heads' shards), 2 more under pp 2 from that
// checkpoint: the uninterrupted one-process curve.
TEST(LlamaLayouts, TensorParallelCheckpointResumesAsPipeline) {
  ASSERT_TRUE(two_ranks());
  TrainConfig c = llama_config();
  const Curve want = reference(c, 1);
  TrainConfig a = c;
  a.tp = 2;
  a.dp = 1;
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/llama_ckpt_tp";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  Curve first3 = want;
  for (auto* v : {&first3.loss, &first3.grad_norm, &first3.loss_noise, &first3.norm_noise}) v->resize(3);
  expect_same(run_layout(a, "llama_resume_a"), first3, "llama tp 2 before the checkpoint");
  TrainConfig b = c;
  b.checkpoint_dir = a.checkpoint_dir;
  b.resume = true;
  b.pp = 2;
  b.dp = 1;
  b.partition = PartitionKind::uniform;
  expect_same(run_layout(b, "llama_resume_b"), want, "llama resumed under pp 2", 3);
}

// tp beyond the key/value heads (or not dividing them) is refused before anything is built, with
// a one-line error naming the option and why: each rank holds whole key/value heads (no
// replication of key/value heads over tp ranks). The model's own check names the valid tp.
TEST(LlamaLayouts, TensorParallelBeyondTheKeyValueHeadsIsRefused) {
  TrainConfig c = llama_config();  // 4 heads over 2 key/value heads
  c.tp = 4;
  try {
    c.validate();
    ADD_FAILURE() << "tp 4 over 2 key/value heads accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tp"), std::string::npos) << m;
    EXPECT_NE(m.find("key/value heads 2 are not divisible by tp 4"), std::string::npos) << m;
  }
  c.tp = 2;
  EXPECT_NO_THROW(c.validate());
}

// The Hugging Face fixture (tests/fixtures/hf_llama_tiny: transformers' LlamaForCausalLM, its AdamW
// steps) under dp 2, tp 2 (a key/value head per rank), pp 2 1F1B and GPipe: the fixture's losses
// and grad norms within the layout's noise plus our one process's own distance to transformers
// (test_llama_fidelity holds that distance to 1e-5), as the GPT's fixture test does.
TEST(LlamaLayouts, HuggingFaceFixtureUnderEveryLayout) {
  ASSERT_TRUE(two_ranks());
  const std::string fx = ST_LLAMA_FIXTURE_DIR;
  auto ref = nlohmann::json::parse(std::ifstream(fx + "/reference.json"));
  Curve want;
  for (auto& s : ref["steps"]) {
    want.loss.push_back(s["loss"].get<double>());
    want.grad_norm.push_back(s["grad_norm"].get<double>());
  }
  TrainConfig c;
  c.model = "llama";
  c.init_from = fx;
  c.data = fx + "/tokens.bin";
  c.seq_len = ref["seq_len"].get<int64_t>();
  c.micro_batch = 1;
  c.grad_accum = ref["batch"].get<int64_t>();
  c.steps = static_cast<int64_t>(want.loss.size());
  c.lr = ref["lr"].get<double>();
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = ref["weight_decay"].get<double>();
  c.clip = ref["clip"].get<double>();
  c.lr_schedule = LrScheduleKind::constant;
  c.warmup = 0;
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  const Curve ours = reference(c, 1);
  Curve distance;
  for (size_t i = 0; i < want.loss.size(); ++i) {
    distance.loss.push_back(rel(ours.loss[i], want.loss[i]));
    distance.grad_norm.push_back(rel(ours.grad_norm[i], want.grad_norm[i]));
  }
  want.loss_noise = ours.loss_noise;
  want.norm_noise = ours.norm_noise;
  const std::vector<std::tuple<int, int, int, const char*>> layouts = {
      {2, 1, 1, "1f1b"}, {1, 2, 1, "1f1b"}, {1, 1, 2, "1f1b"}, {1, 1, 2, "gpipe"}};  // dp, tp, pp, schedule
  for (auto [dp, tp, pp, sched] : layouts) {
    TrainConfig l = c;
    l.dp = dp;
    l.tp = tp;
    l.pp = pp;
    l.grad_accum = c.grad_accum / dp;
    l.schedule = parse_enum<Schedule>(sched, "schedule");
    l.partition = PartitionKind::uniform;
    expect_same(run_layout(l, "llama_hf"), want,
                "llama HF fixture, dp " + std::to_string(dp) + " tp " + std::to_string(tp) + " pp " + std::to_string(pp) +
                    " " + sched,
                0, &distance);
  }
}
