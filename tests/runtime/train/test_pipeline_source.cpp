// The pipeline executor's memory, under mpirun (np 2 and 4, one stage per rank, a GPT of 6 blocks,
// C 32, B 2 × T 16, on the CPU; the gradients exist before the measured step, so its peak is
// activations):
//  - 1F1B holds at most min(p − s, m) micro-batches on stage s, and its peak activation bytes
//    (PipelineStats::peak_activation_bytes: CPU bytes above the step's start) are the SAME for
//    m = 4, 16 and 64: every send buffer is dropped when its group completes. GPipe holds all m
//    and grows by at least one stage boundary activation (B, T, C) f32 per micro-batch.
//  - Interleaved 1F1B (v = 2) holds exactly the bound in_flight_bound computes, flat from m = 16
//    on (where the warm-up is saturated).
//  - The executor throws, naming the bound, when a plan's list holds more than its bound.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <filesystem>

#include "comm/make_communicator.h"
#include "comm/mpi_env.h"
#include "runtime/data/token_data.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/setup/model_registry.h"
#include "ops/step_state.h"
#include "runtime/train/pipeline_source.h"
#include "tensor/philox.h"
#include "tests/support/test_comm_options.h"

using namespace st;
using namespace st::runtime;

namespace {

constexpr int64_t kB = 2, kT = 16, kC = 32;

std::shared_ptr<comm::Communicator> g_world;  // made in main, released before MPI_Finalize
std::shared_ptr<comm::Communicator> world() { return g_world; }

std::shared_ptr<TokenData> tokens() {
  static std::shared_ptr<TokenData> t = [] {
    const std::string path = std::string(ST_TEST_BINARY_DIR) + "/pipeline_source_np" +
                             std::to_string(world()->size()) + ".bin";
    if (world()->rank() == 0) {
      std::vector<uint16_t> tok(20000);
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<uint16_t>(philox4x32_10(5, i).x[0] % 64);
      write_token_file(path, tok);
    }
    world()->barrier()->wait();
    return std::make_shared<TokenData>(path);
  }();
  return t;
}

TrainConfig tiny_gpt() {
  TrainConfig cfg;
  cfg.model = "gpt";
  cfg.layers = 6;  // 8 layers with embedding and head: 2 chunks on each of 4 stages
  cfg.d_model = kC;
  cfg.heads = 4;
  cfg.vocab = 64;
  cfg.seq_len = kT;
  cfg.seed = 1;
  return cfg;
}

// Zeroes the gradients in place, so they exist before the measured step (as the DP reducer's
// bucket views do) and the step's peak is activations only.
class ZeroGradsInPlace : public GradientSync {
 public:
  explicit ZeroGradsInPlace(std::shared_ptr<Module> model) : model_(std::move(model)) {}
  void begin_step() override { model_->zero_grad(/*set_to_none=*/false); }

 private:
  std::shared_ptr<Module> model_;
};

struct StepRun {
  PipelineStats stats;
  int bound = 0;
};

// Two steps of `kind` with m micro-batches on this rank's stage of `comm`; the second step's stats.
StepRun run(Schedule kind, int m, int chunks, std::shared_ptr<comm::Communicator> comm, PipelinePlan* plan_in = nullptr) {
  const int p = comm->size(), s = comm->rank();
  const TrainConfig cfg = tiny_gpt();
  const Partition part = partition_uniform(static_cast<int>(cfg.layers) + 2, p * chunks);
  auto stage = std::make_shared<StageModel>(build_model(cfg, stage_chunks(part, s, p)));  // this stage's layers only
  BatchLayout layout;
  layout.micro_batch = kB;
  layout.grad_accum = m;
  layout.seq_len = kT;
  PipelinePlan plan = plan_in ? *plan_in : make_plan(kind, s, p, m, chunks);
  const int bound = plan.in_flight_bound;
  PipelineGradientSource src(stage, tokens(), layout, Device::cpu, comm, std::move(plan), true);
  ZeroGradsInPlace sync(stage);
  StepContext ctx;  // loss factor 1, the losses added to a state nobody reads here
  ctx.loss_factor = Tensor::from_vector(std::vector<double>{1.0}, {}, DType::f32);
  ctx.state = ops::step_state_tensor(ops::DeviceStepState{}, Device::cpu);
  for (int step = 0; step < 2; ++step) {
    sync.begin_step();
    ctx.step = step;
    src.compute_gradients(ctx, sync);
  }
  return {src.stats(), bound};
}

}  // namespace

TEST(PipelineSource, OneFOneBMemoryIsFlatInTheMicroBatches) {
  const int p = world()->size(), s = world()->rank();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks or more";
  std::vector<int64_t> peak_1f1b, peak_gpipe;
  for (int m : {4, 16, 64}) {
    StepRun a = run(Schedule::one_f_one_b, m, 1, world());
    EXPECT_EQ(a.stats.peak_in_flight, std::min(p - s, m)) << "1f1b m " << m;
    peak_1f1b.push_back(a.stats.peak_activation_bytes);
    StepRun g = run(Schedule::gpipe, m, 1, world());
    EXPECT_EQ(g.stats.peak_in_flight, m) << "gpipe m " << m;
    peak_gpipe.push_back(g.stats.peak_activation_bytes);
  }
  std::printf("stage %d: 1f1b peak %lld / %lld / %lld bytes, gpipe %lld / %lld / %lld (m 4 / 16 / 64)\n", s,
              static_cast<long long>(peak_1f1b[0]), static_cast<long long>(peak_1f1b[1]),
              static_cast<long long>(peak_1f1b[2]), static_cast<long long>(peak_gpipe[0]),
              static_cast<long long>(peak_gpipe[1]), static_cast<long long>(peak_gpipe[2]));
  // the steady state repeats itself allocation for allocation: equal bytes, no tolerance
  EXPECT_EQ(peak_1f1b[1], peak_1f1b[0]) << "stage " << s;
  EXPECT_EQ(peak_1f1b[2], peak_1f1b[0]) << "stage " << s;
  // GPipe keeps every micro-batch: at least its boundary activation (B, T, C) f32 each
  EXPECT_GE(peak_gpipe[2] - peak_gpipe[0], 60 * kB * kT * kC * 4) << "stage " << s;
  EXPECT_GT(peak_gpipe[0], 0);
}

TEST(PipelineSource, InterleavedHoldsWhatTheScheduleBounds) {
  const int p = world()->size(), s = world()->rank();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks or more";
  std::vector<int64_t> peak;
  for (int m : {16, 64}) {
    StepRun a = run(Schedule::interleaved, m, 2, world());
    EXPECT_EQ(a.stats.peak_in_flight, a.bound) << "m " << m;
    EXPECT_EQ(a.bound, std::min(2 * (p - s - 1) + p + 1, 2 * m));
    peak.push_back(a.stats.peak_activation_bytes);
  }
  EXPECT_EQ(peak[1], peak[0]) << "stage " << s;
}

TEST(PipelineSource, ExceedingTheInFlightBoundIsAnError) {
  // each rank alone (a one-stage pipeline, no peer left waiting): GPipe's list holds 4
  // micro-batches, the plan claims 1
  auto alone = world()->split(world()->rank(), 0, "alone");
  PipelinePlan plan{make_schedule(Schedule::gpipe, 0, 1, 4), 1};
  try {
    run(Schedule::gpipe, 4, 1, alone, &plan);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("2 (micro-batch, chunk) pairs hold activations after F1, above the "
                                         "schedule's in-flight bound 1"),
              std::string::npos)
        << e.what();
  }
  plan.in_flight_bound = 4;  // the true bound runs
  EXPECT_EQ(run(Schedule::gpipe, 4, 1, alone, &plan).stats.peak_in_flight, 4);
}

int main(int argc, char** argv) {
  int provided;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  g_world = st::comm::make_communicator("mpi", std::chrono::seconds(120), st::testing_support::test_comm_options()).world;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) ::testing::GTEST_FLAG(brief) = true;
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  g_world.reset();
  MPI_Finalize();
  return any;
}
