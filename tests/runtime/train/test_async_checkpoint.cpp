// --async-checkpoint 1 (runtime/train/async_checkpoint.h), under mpirun -np 1 and 2: one process,
// then at np 2 tensor parallel 2 (split tensors assembled over the tp group) and ZeRO-3 at dp 2
// (weights and moments assembled from the pieces), test_layouts' 4-block GPT, 5 steps, a
// checkpoint every 2 steps and at the end (steps 2, 4, 5).
//   (1) training goes on while the writer writes: step 2's writer is held (TrainSeams'
//       checkpoint_writer seam, between its model and optimizer files) until the training thread
//       has computed step 3's gradients (TrainSeams::after_gradients) — with the synchronous save
//       the writer seam is never called and step 3 cannot start before the save ends; and every
//       file of every checkpoint (tensors, state.json with its checksums, config.json) is byte for
//       byte the synchronous save's;
//   (2) a run resumed from the asynchronous step 2 continues bit for bit: the same loss and
//       gradient norm (==) at steps 3-5 and the same step_5 files as the uninterrupted run;
//   (3) a writer that fails on the last rank at step 4 ends run_parallel_training on every rank
//       (none hangs: this binary would time out) with IOError naming that rank and the cause,
//       and step 2 stays the newest checkpoint (4 was never committed); so does a crash right
//       before the rename (TrainSeams::crash_before_commit) in a run resumed from step 2.
// Cost: about 3 s at np 1 and 6 s at np 2 on 2 cores.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/data/token_data.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/train/parallel_training.h"
#include "runtime/train/train_checkpoint.h"
#include "tensor/philox.h"
#include "tests/support/checkpoint_files.h"
#include "tests/support/mpi_world.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

using st::testing::barrier;
using st::testing_support::expect_same_files;
using st::testing::world_rank;
using st::testing::world_size;

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/async_checkpoint_np" + std::to_string(world_size());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      std::vector<uint16_t> tokens(20000);  // test_layouts' learnable stream
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = static_cast<uint16_t>(philox_uniform(3, i) < 0.8f ? i % 37 : (philox4x32_10(4, i).x[0] % 62));
      write_token_file(d + "/tokens.bin", tokens);
    }
    barrier();
    return d;
  }();
  return dir;
}

// test_layouts' base config (a 4-layer GPT, d 48, 12 heads, V 62, T 16, B 2 × K 2) in `layout`:
// "one" (one process), "tp2", "zero3" (dp 2).
TrainConfig config(const std::string& layout, const std::string& name, bool async) {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 4;
  c.d_model = 48;
  c.heads = 12;
  c.vocab = 62;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.steps = 5;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 1.0;
  c.eps = 1e-4;
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  if (layout == "tp2") c.tp = 2;
  if (layout == "zero3") {
    c.dp = 2;
    c.micro_batch = 1;
    c.zero = 3;
  }
  c.checkpoint_dir = work_dir() + "/" + layout + "_" + name;
  c.checkpoint_every = 2;
  c.keep_checkpoints = 0;
  c.async_checkpoint = async;
  c.metrics = c.checkpoint_dir + ".jsonl";
  if (world_rank() == 0) {
    fs::remove_all(c.checkpoint_dir);
    fs::remove(c.metrics);
  }
  barrier();
  return c;
}

std::vector<std::string> layouts() {
  if (world_size() == 1) return {"one"};
  return {"tp2", "zero3"};
}

struct Curve {
  std::vector<double> loss, grad_norm;
};
Curve read_curve(const std::string& metrics) {
  Curve c;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    c.loss.push_back(j["loss"].get<double>());
    c.grad_norm.push_back(j["grad_norm"].get<double>());
  }
  return c;
}

// The seams of (1): the training thread publishes the step whose gradients it computed; step 2's
// writer waits (up to 60 s) until that is step 3.
struct HeldWriter {
  std::atomic<int64_t> latest{0};
  std::atomic<bool> called{false}, saw_step3{false};
  TrainSeams seams() {
    TrainSeams s;
    s.after_gradients = [this](int64_t step, int, std::vector<Tensor>&) { latest.store(step); };
    s.checkpoint_writer = [this](int64_t step, int) {
      if (step != 2) return;
      called.store(true);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (latest.load() < 3 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      saw_step3.store(latest.load() >= 3);
    };
    return s;
  }
};

}  // namespace

TEST(AsyncCheckpoint, TrainingGoesOnWhileTheWriterWritesTheSynchronousFiles) {
  for (const std::string& layout : layouts()) {
    const TrainConfig sync = config(layout, "sync", false);
    ASSERT_EQ(run_parallel_training(sync), 0);
    const TrainConfig async = config(layout, "async", true);
    HeldWriter held;
    ASSERT_EQ(run_parallel_training(async, held.seams()), 0);
    barrier();
    EXPECT_TRUE(held.called.load()) << layout << ": no asynchronous writer wrote step 2";
    EXPECT_TRUE(held.saw_step3.load()) << layout << ": step 3 did not run while step 2 was being written";
    if (world_rank() == 0) {
      EXPECT_EQ(CheckpointDir(async.checkpoint_dir).complete_steps(), (std::vector<int64_t>{2, 4, 5})) << layout;
      EXPECT_TRUE(CheckpointDir(async.checkpoint_dir).stale().empty()) << layout;
      for (int64_t step : {2, 4, 5}) expect_same_files(sync.checkpoint_dir, async.checkpoint_dir, step, layout);
    }
    barrier();
  }
}

TEST(AsyncCheckpoint, AResumeFromAnAsynchronousCheckpointIsBitExact) {
  for (const std::string& layout : layouts()) {
    const TrainConfig whole = config(layout, "whole", true);
    ASSERT_EQ(run_parallel_training(whole), 0);
    TrainConfig resumed = config(layout, "resumed", true);
    if (world_rank() == 0) {
      fs::create_directories(resumed.checkpoint_dir);
      fs::copy(CheckpointDir(whole.checkpoint_dir).path_for(2), CheckpointDir(resumed.checkpoint_dir).path_for(2));
    }
    barrier();
    resumed.resume = true;
    ASSERT_EQ(run_parallel_training(resumed), 0);
    barrier();
    if (world_rank() == 0) {
      const Curve w = read_curve(whole.metrics), r = read_curve(resumed.metrics);
      ASSERT_EQ(w.loss.size(), 5u) << layout;
      ASSERT_EQ(r.loss.size(), 3u) << layout;
      for (size_t i = 0; i < 3; ++i) {  // the same arithmetic on the same state: equal bits
        EXPECT_EQ(r.loss[i], w.loss[i + 2]) << layout << " loss, step " << i + 3;
        EXPECT_EQ(r.grad_norm[i], w.grad_norm[i + 2]) << layout << " grad norm, step " << i + 3;
      }
      for (int64_t step : {4, 5}) expect_same_files(whole.checkpoint_dir, resumed.checkpoint_dir, step, layout + " resumed");
    }
    barrier();
  }
}

TEST(AsyncCheckpoint, AFailedWriterEndsEveryRankNamingItAndLeavesThePreviousCheckpoint) {
  const int last = world_size() - 1;
  for (const std::string& layout : layouts()) {
    const TrainConfig c = config(layout, "fail", true);
    TrainSeams seams;
    seams.checkpoint_writer = [last](int64_t step, int rank) {
      if (step == 4 && rank == last) ST_THROW(IOError, "disk full (test)");
    };
    std::string what;
    try {
      run_parallel_training(c, seams);
    } catch (const IOError& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("the writer of rank " + std::to_string(last) + " failed: disk full (test)"), std::string::npos)
        << layout << ": rank " << world_rank() << " got '" << what << "'";
    EXPECT_NE(what.find("step 4"), std::string::npos) << what;
    barrier();
    if (world_rank() == 0) {
      EXPECT_EQ(CheckpointDir(c.checkpoint_dir).latest(), CheckpointDir(c.checkpoint_dir).path_for(2)) << layout;
    }
    barrier();
    // a crash right before the rename (every rank throws once every writer finished): resumed
    // from step 2, the run's step 4 is never renamed and step 2 stays the newest
    TrainConfig r = c;
    r.resume = true;
    r.metrics.clear();
    TrainSeams crash;
    crash.crash_before_commit = true;
    EXPECT_THROW(run_parallel_training(r, crash), Error) << layout;
    barrier();
    if (world_rank() == 0) {
      EXPECT_EQ(CheckpointDir(c.checkpoint_dir).latest(), CheckpointDir(c.checkpoint_dir).path_for(2)) << layout;
      EXPECT_TRUE(fs::exists(CheckpointDir(c.checkpoint_dir).temp_path_for(4))) << layout << ": the crash's leftover";
    }
    barrier();
  }
}
