// Checkpoints written by one layout resumed by another (layouts_common.h: the property, the
// tolerance): tp as pp, ZeRO-2 without ZeRO, ZeRO-3 elsewhere and back, dp × tp ZeRO-1 as dp × pp and
// back, pp as dp × pp. The resumed steps equal the uninterrupted one-process curve within its noise.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;
namespace fs = std::filesystem;


TEST(Layouts, ResumeUnderAnotherLayout) {
  const int n = world_size();
  TrainConfig c = base_config();
  Curve want = reference(c, 1);  // global batch 4 = B 2 × K 2 × dp 1
  // first 3 steps as a pipeline of n stages, then 2 more as dp 2 (K 1) or another pipeline
  TrainConfig a = c;
  a.pp = n;
  a.dp = 1;
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/ckpt";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  Curve first3 = want;  // steps 1-3
  for (auto* v : {&first3.loss, &first3.grad_norm, &first3.loss_noise, &first3.norm_noise}) v->resize(3);
  expect_same(run_layout(a, "resume_a"), first3, "before the checkpoint");
  TrainConfig b = c;
  b.checkpoint_dir = a.checkpoint_dir;
  b.resume = true;
  if (n % 2 == 0) {
    b.dp = 2;
    b.pp = n / 2;
    b.grad_accum = 1;
  } else {
    b.dp = n;  // global batch must stay 4: B 2 × K 2 × dp 1 → with dp 3 it cannot; use pp again
    b.dp = 1;
    b.pp = n;
    b.schedule = Schedule::gpipe;
  }
  expect_same(run_layout(b, "resume_b"), want, "after resuming", 3);
}

TEST(Layouts, ResumeTensorParallelCheckpointAsPipeline) {
  const int n = world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "tp 2 then pp 2";
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  Curve want = reference(c, 1);
  TrainConfig a = c;
  a.tp = n;
  a.dp = 1;
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/ckpt_tp";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  run_layout(a, "tp_a");
  TrainConfig b = c;
  b.checkpoint_dir = a.checkpoint_dir;
  b.resume = true;
  b.pp = n;
  b.dp = 1;
  expect_same(run_layout(b, "tp_b"), want, "tp checkpoint resumed as pp", 3);
}

TEST(Layouts, ResumeZeroCheckpointWithoutZero) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.grad_accum = 1;
  c.micro_batch = 2;
  Curve want = reference(c, n);  // global batch 2n
  TrainConfig a = c;
  a.dp = n;
  a.zero = 2;  // its optimizer state as sharded as zero 1's (ResumeZeroTensorParallel… writes zero 1)
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/ckpt_zero";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  run_layout(a, "zero_a");
  TrainConfig b = c;
  b.checkpoint_dir = a.checkpoint_dir;
  b.resume = true;
  b.dp = n;
  b.zero = false;
  if (n % 2 == 0) {  // dp n/2 with twice the micro-batch: the same global batch
    b.dp = n / 2;
    b.pp = 2;
    b.micro_batch = 2;
    b.grad_accum = 2;
  }
  expect_same(run_layout(b, "zero_b"), want, "zero 2 checkpoint resumed without zero", 3);
}

// A zero 3 checkpoint (each tensor assembled from its dp pieces, written by the rank holding its
// first element) resumed without ZeRO at dp n and as pp 2 (dp n/2 × pp 2 at even n, else pp n),
// and the reverse: a pp checkpoint and a zero 0 one resumed under zero 3. The resumed steps 4-5
// equal the uninterrupted one-process curve within its noise.
TEST(Layouts, ResumeZero3CheckpointElsewhere) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.grad_accum = 1;
  c.micro_batch = 2;
  const Curve want = reference(c, n);  // global batch 2n
  auto as_pp = [&](TrainConfig t) {
    t.zero = 0;
    if (n % 2 == 0) {
      t.dp = n / 2;
      t.pp = 2;
      t.grad_accum = 2;
    } else {
      t.dp = 1;
      t.pp = n;
      t.grad_accum = n;
    }
    return t;
  };
  auto fresh = [&](TrainConfig t, const std::string& dir) {
    t.steps = 3;
    t.checkpoint_dir = work_dir() + "/" + dir;
    if (world_rank() == 0) fs::remove_all(t.checkpoint_dir);
    barrier();
    run_layout(t, dir + "_a");
    return t.checkpoint_dir;
  };
  auto resumed = [&](TrainConfig t, const std::string& dir) {  // on a copy: the resumed run saves its own
    t.checkpoint_dir = dir + "_resumed";
    if (world_rank() == 0) {
      fs::remove_all(t.checkpoint_dir);
      fs::copy(dir, t.checkpoint_dir, fs::copy_options::recursive);
    }
    barrier();
    t.resume = true;
    return run_layout(t, "resumed");
  };
  TrainConfig z3 = c;
  z3.dp = n;
  z3.zero = 3;
  TrainConfig z0 = z3;
  z0.zero = 0;
  const std::string from_z3 = fresh(z3, "ckpt_zero3");
  expect_same(resumed(z0, from_z3), want, "zero 3 checkpoint resumed under zero 0", 3);
  expect_same(resumed(as_pp(z3), from_z3), want, "zero 3 checkpoint resumed under pp", 3);
  expect_same(resumed(z3, fresh(as_pp(z3), "ckpt_pp_to_zero3")), want, "pp checkpoint resumed under zero 3", 3);
  expect_same(resumed(z3, fresh(z0, "ckpt_zero0_to_zero3")), want, "zero 0 checkpoint resumed under zero 3", 3);
  TrainConfig bf = z3;  // bf16: the f32 masters and AdamW state gathered; resumed under zero 0, within bf16's 2 %
  bf.precision = Precision::bf16;
  TrainConfig bf0 = bf;
  bf0.zero = 0;
  const Curve b = resumed(bf0, fresh(bf, "ckpt_zero3_bf16"));
  ASSERT_EQ(b.loss.size(), 2u);
  for (size_t i = 0; i < b.loss.size(); ++i) EXPECT_NEAR(b.loss[i], want.loss[i + 3], 0.02 * want.loss[i + 3]) << "bf16";
}

TEST(Layouts, ResumeZeroTensorParallelCheckpointElsewhere) {
  if (world_size() != 4) GTEST_SKIP() << "dp 2 × tp 2 with zero 1 needs 4 ranks";
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  c.vocab = 62;
  Curve want = reference(c, 2);  // two replicas' global batch
  TrainConfig a = c;
  a.dp = 2;
  a.tp = 2;
  a.zero = true;
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/ckpt_zero_tp";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  run_layout(a, "zero_tp_a");
  TrainConfig b = c;  // tp shards and zero shards gathered into full tensors, resumed as dp 2 × pp 2
  b.checkpoint_dir = a.checkpoint_dir;
  b.resume = true;
  b.dp = 2;
  b.pp = 2;
  expect_same(run_layout(b, "zero_tp_b"), want, "dp 2 × tp 2 zero checkpoint resumed as dp 2 × pp 2", 3);

  TrainConfig d = c;  // and back: a dp 2 × pp 2 checkpoint split into tp and zero shards
  d.dp = 2;
  d.pp = 2;
  d.steps = 3;
  d.checkpoint_dir = work_dir() + "/ckpt_to_zero_tp";
  if (world_rank() == 0) fs::remove_all(d.checkpoint_dir);
  barrier();
  run_layout(d, "to_zero_tp_a");
  TrainConfig e = c;
  e.checkpoint_dir = d.checkpoint_dir;
  e.resume = true;
  e.dp = 2;
  e.tp = 2;
  e.zero = true;
  expect_same(run_layout(e, "to_zero_tp_b"), want, "dp 2 × pp 2 checkpoint resumed as dp 2 × tp 2 zero", 3);
}
