// --async-checkpoint 1 in the graph mode, whose step lines are read a step late (on the CPU through
// TrainSeams::rehearse_graph: the graph mode's code without the capture, runtime/train/train_step.h).
// The save's snapshot is taken right after its step's launch, queued behind that step, and the
// save is handed to its writer once the step's report is read — after the next step's launch
// (runtime/train/trainer.h's snapshot_early), so a save never leaves the device waiting for the
// host. Held here, fp16 from a loss scale of 2^24 (the first steps overflow and are skipped),
// dropout on, a save every 3 of 7 steps (steps 3, 6 and 7):
//   (1) every checkpoint is byte for byte the synchronous save's of the same graph-mode run. The
//       loss scale and the optimizer's step count (which a skipped step does not advance) are
//       known only from the report, after the snapshot was taken: without their rewrite
//       state.json and the optimizer file differ;
//   (2) the next step is launched before the save is handed to its writer: in the run's trace,
//       "step k+1" (the launch) begins before step k's "checkpoint start". Reading a save's step
//       before launching the next one (the order before snapshot_early) fails it.
// Cost: ~2 s on 2 cores.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/token_data.h"
#include "runtime/observe/trace.h"
#include "runtime/train/trainer.h"
#include "tensor/philox.h"
#include "tests/support/checkpoint_files.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/async_checkpoint_graph";
    fs::remove_all(d);
    fs::create_directories(d);
    std::vector<uint16_t> tokens(8000);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<uint16_t>(philox_uniform(5, i) < 0.8f ? i % 29 : (philox4x32_10(6, i).x[0] % 60));
    write_token_file(d + "/tokens.bin", tokens);
    return d;
  }();
  return dir;
}

// test_graph_step_cpu's GPT (2 blocks, d 32, V 64, T 16, B 2 × K 2), fp16, dropout 0.1, the graph
// mode, a checkpoint every 3 of 7 steps under work_dir()/NAME.
TrainConfig config(const std::string& name, bool async) {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.vocab = 64;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.steps = 7;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 0.5;
  c.dropout = 0.1;
  c.precision = Precision::fp16;
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  c.cuda_graph = true;
  c.checkpoint_dir = work_dir() + "/" + name;
  c.checkpoint_every = 3;
  c.keep_checkpoints = 0;
  c.async_checkpoint = async;
  c.trace = work_dir() + "/" + name + ".json";
  fs::remove_all(c.checkpoint_dir);
  return c;
}

struct Ran {
  std::vector<trace::Event> events;  // the training thread's, in recording order
  int64_t skipped = 0;               // steps the loss scale skipped
};

Ran run(const TrainConfig& c) {
  TrainSeams seams;
  seams.rehearse_graph = true;
  Trainer t(c, seams);
  EXPECT_TRUE(t.cuda_graph()) << "the graph mode was refused: nothing here is tested";
  t.scaler().set_state(std::ldexp(1.0, 24), 0);  // before the first launch: the step state starts from it
  t.run();
  Ran r;
  r.events = trace::events();
  r.skipped = t.step() - t.optimizer().steps_taken();
  return r;
}

int64_t begin_of(const std::vector<trace::Event>& events, const std::string& name, int nth = 0) {
  for (const trace::Event& e : events)
    if (e.name == name && nth-- == 0) return e.begin_us;
  ADD_FAILURE() << "no event '" << name << "'";
  return -1;
}

}  // namespace

TEST(AsyncCheckpointGraph, TheSnapshotAtTheLaunchWritesTheSynchronousFilesAndTheNextStepIsNotHeld) {
  const TrainConfig sync = config("sync", false), async = config("async", true);
  const Ran s = run(sync);
  const Ran a = run(async);
  ASSERT_GE(a.skipped, 1) << "no step overflowed at 2^24: the step count's rewrite is not tested";
  EXPECT_EQ(a.skipped, s.skipped);
  EXPECT_EQ(CheckpointDir(async.checkpoint_dir).complete_steps(), (std::vector<int64_t>{3, 6, 7}));
  for (int64_t step : {3, 6, 7}) st::testing_support::expect_same_files(sync.checkpoint_dir, async.checkpoint_dir, step, "async");
  // (2): the saves of steps 3 and 6 are the first two handed to a writer
  for (auto [step, nth] : {std::pair{3, 0}, std::pair{6, 1}}) {
    const int64_t next_launch = begin_of(a.events, "step " + std::to_string(step + 1));
    const int64_t handed = begin_of(a.events, "checkpoint start", nth);
    EXPECT_LT(next_launch, handed) << "step " << step + 1 << " was launched after step " << step
                                   << "'s save was handed to its writer: the host read step " << step << " first";
  }
}
