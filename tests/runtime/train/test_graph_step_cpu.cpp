// The graph mode of the training step without the capture (TrainSeams::rehearse_graph), on the CPU,
// against the eager mode: bit for bit. Both run the one step body (runtime/train/train_step.h);
// what the graph mode does differently is all exercised here — the micro-batches staged into
// persistent device buffers, the dropout seeds read from a seed table instead of passed as
// arguments, the warm-up under the host-read guard, the report read a step late by run() — so a
// difference here is a bug the GPU would have too. What only the GPU can check (the capture
// itself, replays) is tests/gpu/test_gpu_cuda_graph.cpp; that the body itself computes what the
// trainer computed before it was written once is tests/runtime/train/test_step_golden.cpp. The
// asynchronous save's snapshot at its step's launch, which only the graph mode takes, is the last
// test here.
//
// No tolerance: the same operations on the same values in the same order give the same bits;
// the doubles of the step lines are compared with memcmp (a skipped step's NaN norm included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/embedding.h"
#include "runtime/data/token_data.h"
#include "runtime/train/gradient_source.h"
#include "runtime/train/trainer.h"
#include "tensor/graph.h"
#include "tensor/philox.h"
#include "tests/support/checkpoint_files.h"
#include "runtime/observe/trace.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/graph_step_cpu";
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

TrainConfig config(Precision p, int64_t K, double dropout) {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.vocab = 64;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = K;
  c.steps = 6;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 0.5;  // below the norms of the first steps: the clip coefficient is used
  c.dropout = dropout;
  c.precision = p;
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  return c;
}

TrainSeams rehearse(bool graph) {
  TrainSeams s;
  s.rehearse_graph = graph;
  return s;
}

struct TrainRun {
  std::vector<StepMetrics> steps;
  NamedTensors state;    // the optimizer's state_dict after the last step
  NamedTensors masters;  // the f32 master weights
  double scale = 0;
  int64_t good_steps = 0;
};

TrainRun collect(Trainer& t, std::vector<StepMetrics> steps) {
  TrainRun r;
  r.steps = std::move(steps);
  r.state = t.optimizer().state_dict();
  r.masters = t.optimizer().master_weights();
  r.scale = t.scaler().scale();
  r.good_steps = t.scaler().good_steps();
  return r;
}

TrainRun train(TrainConfig c, bool graph, double initial_scale = 0) {
  c.cuda_graph = graph;
  Trainer t(c, rehearse(graph));
  if (graph) {
    EXPECT_TRUE(t.cuda_graph()) << "the graph step was refused";
  }
  if (initial_scale > 0) t.scaler().set_state(initial_scale, 0);
  std::vector<StepMetrics> steps;
  for (int64_t s = 0; s < c.steps; ++s) steps.push_back(t.train_step());
  return collect(t, steps);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same(const TrainRun& eager, const TrainRun& graph) {
  ASSERT_EQ(eager.steps.size(), graph.steps.size());
  for (size_t s = 0; s < eager.steps.size(); ++s) {
    const StepMetrics &e = eager.steps[s], &g = graph.steps[s];
    EXPECT_EQ(e.step, g.step);
    EXPECT_TRUE(same_bits(e.loss, g.loss)) << "step " << e.step << ": loss " << e.loss << " vs " << g.loss;
    EXPECT_TRUE(same_bits(e.grad_norm, g.grad_norm) || (std::isnan(e.grad_norm) && std::isnan(g.grad_norm)))
        << "step " << e.step << ": grad norm " << e.grad_norm << " vs " << g.grad_norm;
    EXPECT_EQ(e.skipped, g.skipped) << "step " << e.step;
    EXPECT_TRUE(same_bits(e.loss_scale, g.loss_scale)) << "step " << e.step << ": scale " << e.loss_scale << " vs "
                                                       << g.loss_scale;
    EXPECT_TRUE(same_bits(e.lr, g.lr)) << "step " << e.step;
  }
  EXPECT_TRUE(same_bits(eager.scale, graph.scale));
  EXPECT_EQ(eager.good_steps, graph.good_steps);
  const std::pair<const NamedTensors*, const NamedTensors*> pairs[] = {{&eager.state, &graph.state},
                                                                       {&eager.masters, &graph.masters}};
  for (const auto& [mine, other] : pairs) {
    ASSERT_EQ(mine->size(), other->size());
    for (size_t i = 0; i < mine->size(); ++i) {
      const Tensor &a = (*mine)[i].second, &b = (*other)[i].second;
      ASSERT_EQ((*mine)[i].first, (*other)[i].first);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << (*mine)[i].first;
      EXPECT_EQ(std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()), 0)
          << (*mine)[i].first << " differs after " << eager.steps.size() << " steps";
    }
  }
}

}  // namespace

// f32, two micro-batches per step, dropout 0.1: the seed table's masks, the loss sum over K
TEST(GraphStepCpu, Fp32AccumulationAndDropoutEqualEager) {
  const TrainConfig c = config(Precision::fp32, 2, 0.1);
  expect_same(train(c, false), train(c, true));
}

// bf16 with f32 masters: the low-precision copies rewritten by the device-scalar AdamW
TEST(GraphStepCpu, Bf16EqualsEager) {
  const TrainConfig c = config(Precision::bf16, 1, 0.1);
  expect_same(train(c, false), train(c, true));
}

// fp16 from a scale of 2^24: the first steps overflow and are skipped on the device's decision
// (scale halved each time), then the run trains; every decision and scale equal the host's
TEST(GraphStepCpu, Fp16SkipsAndScaleEqualEager) {
  TrainConfig c = config(Precision::fp16, 2, 0.0);
  c.steps = 8;
  const double scale = std::ldexp(1.0, 24);
  const TrainRun eager = train(c, false, scale), graph = train(c, true, scale);
  int skipped = 0;
  for (const StepMetrics& m : eager.steps) skipped += m.skipped ? 1 : 0;
  ASSERT_GE(skipped, 1) << "no step overflowed at 2^40: the case tests nothing";
  ASSERT_LT(skipped, static_cast<int>(c.steps)) << "every step overflowed: the update path is not tested";
  expect_same(eager, graph);
}

// run(): the graph path reads step n's line after launching step n + 1, and waits before a
// checkpoint; the metrics lines and the checkpoints equal the eager run's, and a graph run resumed
// from the eager run's checkpoint continues with the eager run's numbers (its device state is
// built from the resumed scaler and optimizer).
TEST(GraphStepCpu, RunWithLateLinesCheckpointsAndResumeEqualEager) {
  auto run_to = [](bool graph, const std::string& name, int64_t steps, bool resume) {
    TrainConfig c = config(Precision::fp32, 2, 0.1);
    c.steps = steps;
    c.checkpoint_every = 3;
    c.checkpoint_dir = work_dir() + "/" + name + "/ckpt";
    c.metrics = work_dir() + "/" + name + "/metrics.jsonl";
    c.resume = resume;
    c.cuda_graph = graph;
    Trainer t(c, rehearse(graph));
    t.run();
    return collect(t, {});
  };
  auto lines = [](const std::string& name) {
    std::vector<nlohmann::json> out;
    std::ifstream in(work_dir() + "/" + name + "/metrics.jsonl");
    for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
    return out;
  };
  fs::remove_all(work_dir() + "/eager");
  fs::remove_all(work_dir() + "/graph");
  const TrainRun eager = run_to(false, "eager", 7, false);
  const TrainRun graph = run_to(true, "graph", 7, false);
  expect_same(eager, graph);
  const auto le = lines("eager"), lg = lines("graph");
  ASSERT_EQ(le.size(), 7u);
  ASSERT_EQ(lg.size(), 7u);
  for (size_t i = 0; i < le.size(); ++i) {
    EXPECT_EQ(lg[i]["step"], le[i]["step"]);
    EXPECT_TRUE(same_bits(lg[i]["loss"].get<double>(), le[i]["loss"].get<double>())) << "line " << i;
    EXPECT_TRUE(same_bits(lg[i]["grad_norm"].get<double>(), le[i]["grad_norm"].get<double>())) << "line " << i;
  }
  // resume the eager run's step-6 checkpoint under the graph step, to step 7
  fs::remove_all(work_dir() + "/resumed");
  fs::create_directories(work_dir() + "/resumed");
  fs::copy(work_dir() + "/eager/ckpt", work_dir() + "/resumed/ckpt", fs::copy_options::recursive);
  fs::remove_all(work_dir() + "/resumed/ckpt/step_00000007");  // the newest is then step 6's
  std::ofstream(work_dir() + "/resumed/metrics.jsonl") << "";
  const TrainRun resumed = run_to(true, "resumed", 7, true);
  EXPECT_TRUE(same_bits(resumed.scale, eager.scale));
  for (size_t i = 0; i < eager.masters.size(); ++i)
    EXPECT_EQ(std::memcmp(eager.masters[i].second.data_ptr(), resumed.masters[i].second.data_ptr(),
                          eager.masters[i].second.nbytes()),
              0)
        << eager.masters[i].first << " differs after the resumed step 7";
}

// The guard that makes the graph step's code prove it reads nothing back: inside it, item() and a
// device → host copy throw CaptureError naming the read; check_on_host still runs its check.
TEST(GraphStepCpu, HostReadsInsideTheGuardAreRefused) {
  Tensor t = Tensor::from_vector(std::vector<double>{3.0}, {1});
  {
    HostReadGuard guard("a test step");
    try {
      (void)t.item();
      FAIL() << "item() inside the guard was allowed";
    } catch (const CaptureError& e) {
      EXPECT_NE(std::string(e.what()).find("inside a test step"), std::string::npos) << e.what();
    }
    int ran = 0;
    check_on_host(Tensor::from_vector(std::vector<int64_t>{-1, 7}, {2}), [&](const std::vector<int64_t>& v) {
      ++ran;
      EXPECT_EQ(v, (std::vector<int64_t>{-1, 7}));
    });
    EXPECT_EQ(ran, 1);
    AllowHostReads allow;
    EXPECT_EQ(t.item(), 3.0);
  }
  EXPECT_EQ(t.item(), 3.0);
}

// A model whose forward reads a device value back (here: its token ids, on the host) cannot be a
// graph: the warm-up, under the host-read guard, stops at the read, and the trainer runs that step
// and every later one eagerly — the same numbers as a run that never tried (the failed warm-up
// changed nothing the eager step reads).
namespace {
struct ReadingLayer : Layer {
  explicit ReadingLayer(int64_t V) {
    w = register_parameter("w", Tensor::from_vector(std::vector<double>(V * V, 0.01), {V, V}));
  }
  Tensor forward(const Tensor& ids) override {
    (void)ids.to_double();  // the host read a graph cannot hold
    return ops::embedding(w, ids);  // (B, T) → (B, T, V): the logits
  }
  LayerCost cost(int64_t) const override { return {}; }
  Tensor w;
};
struct ReadingModel : LanguageModel {
  explicit ReadingModel(int64_t V) : V_(V) { add_layer("reader", std::make_shared<ReadingLayer>(V)); }
  std::string family() const override { return "reading"; }
  int64_t vocab_size() const override { return V_; }
  int64_t context_length() const override { return 16; }
  nlohmann::json config_json() const override { return nlohmann::json::object(); }
  void init_weights(uint64_t) override {}
  int64_t V_;
};
struct ReadingRun {
  std::vector<double> loss;
  NamedTensors masters;
  bool graph_after = true;
  std::string out;
};
ReadingRun train_reading_model(bool graph, bool use_run) {
  TrainConfig c = config(Precision::fp32, 1, 0.0);
  c.steps = 3;
  c.cuda_graph = graph;
  auto model = std::make_shared<ReadingModel>(64);
  TrainerWiring w;
  w.seams = rehearse(graph);
  BatchLayout layout;
  layout.micro_batch = 2, layout.seq_len = 16;
  w.source = std::make_unique<LocalGradientSource>(model, std::make_shared<TokenData>(c.data), layout, Device::cpu);
  w.layout = layout;
  Trainer t(c, model, std::move(w));
  EXPECT_EQ(t.cuda_graph(), graph);
  ReadingRun r;
  testing::internal::CaptureStdout();
  if (use_run)
    t.run();
  else
    for (int64_t s = 0; s < c.steps; ++s) r.loss.push_back(t.train_step().loss);
  r.out = testing::internal::GetCapturedStdout();
  r.graph_after = t.cuda_graph();
  r.masters = t.optimizer().master_weights();
  return r;
}
}  // namespace

TEST(GraphStepCpu, AWarmUpThatReadsBackFallsBackToEager) {
  const ReadingRun eager = train_reading_model(false, false), graph = train_reading_model(true, false),
                   via_run = train_reading_model(true, true);
  for (const ReadingRun* g : {&graph, &via_run}) {
    EXPECT_FALSE(g->graph_after) << "the warm-up's host read did not turn the graph off";
    EXPECT_NE(g->out.find("cuda graph: off (reading tensor values on the host"), std::string::npos) << g->out;
    ASSERT_EQ(g->masters.size(), eager.masters.size());
    for (size_t i = 0; i < eager.masters.size(); ++i)
      EXPECT_EQ(std::memcmp(g->masters[i].second.data_ptr(), eager.masters[i].second.data_ptr(),
                            eager.masters[i].second.nbytes()),
                0)
          << eager.masters[i].first;
  }
  ASSERT_EQ(graph.loss.size(), eager.loss.size());
  for (size_t s = 0; s < eager.loss.size(); ++s) EXPECT_TRUE(same_bits(graph.loss[s], eager.loss[s])) << "step " << s + 1;
}

namespace {

// config() in fp16 with dropout, a checkpoint every 3 of 7 steps under work_dir()/NAME and the
// run's trace (the saves of (2) below).
TrainConfig saving_config(const std::string& name, bool async) {
  TrainConfig c = config(Precision::fp16, 2, 0.1);
  c.steps = 7;
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

Ran run_saving(const TrainConfig& c) {
  Trainer t(c, rehearse(true));
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

// --async-checkpoint 1 in the graph mode, whose step lines are read a step late: the save's
// snapshot is taken right after its step's launch, queued behind that step, and handed to its
// writer once the step's report is read — after the next step's launch (runtime/train/trainer.h's
// snapshot_early), so a save never leaves the device waiting for the host. From a loss scale of
// 2^24 (the first steps overflow and are skipped), dropout on, saves at steps 3, 6 and 7:
//   (1) every checkpoint is byte for byte the synchronous save's of the same graph-mode run. The
//       loss scale and the optimizer's step count (which a skipped step does not advance) are
//       known only from the report, after the snapshot was taken: without their rewrite
//       state.json and the optimizer file differ;
//   (2) the next step is launched before the save is handed to its writer: in the run's trace,
//       "step k+1" (the launch) begins before step k's "checkpoint start". Reading a save's step
//       before launching the next one (the order before snapshot_early) fails it.
TEST(GraphStepCpu, AnAsynchronousSaveTakenAtItsStepsLaunchWritesTheSynchronousFiles) {
  const TrainConfig sync = saving_config("sync", false), async = saving_config("async", true);
  const Ran s = run_saving(sync);
  const Ran a = run_saving(async);
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
