// The trainer's step through its plug-in points, with a scripted gradient source instead of a
// model's backward: the reductions carry the loss and the squared norm (a fake "2 ranks" sum),
// the hooks run once per step, clipping uses the reduced norm, and an fp16 overflow skips the
// step (weights and optimizer untouched, scale halved) — each against hand-computed numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/step_state.h"
#include "runtime/train/trainer.h"

namespace st::runtime {
namespace {

struct ToyLayer : Layer {
  ToyLayer() {
    w = register_parameter("w", Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}));
    b = register_parameter("b", Tensor::zeros({2}));
  }
  Tensor forward(const Tensor& x) override { return x; }
  LayerCost cost(int64_t) const override { return {}; }
  Tensor w, b;
};

struct ToyModel : LanguageModel {
  ToyModel() { add_layer("toy", layer = std::make_shared<ToyLayer>()); }
  std::string family() const override { return "toy"; }
  int64_t vocab_size() const override { return 2; }
  int64_t context_length() const override { return 1; }
  nlohmann::json config_json() const override { return nlohmann::json::object(); }
  void init_weights(uint64_t) override {}  // the toy's values are set by its constructor
  std::shared_ptr<ToyLayer> layer;
};

// Writes loss_scale × (the scripted gradient of the step) into each parameter, as backward would.
struct ScriptedSource : GradientSource {
  explicit ScriptedSource(std::shared_ptr<ToyModel> m) : model(std::move(m)) {}
  void compute_gradients(const StepContext& ctx, GradientSync&) override {
    ++calls;
    const double loss_scale = ctx.loss_factor.item();  // scale / (K·dp), K = dp = 1 here
    const auto& g = grads.at(static_cast<size_t>(ctx.step));
    for (auto& [name, p] : model->named_parameters()) {
      std::vector<double> v = g.at(name);
      for (double& x : v) x *= loss_scale;
      p.set_grad(Tensor::from_vector(v, p.shape(), p.dtype()));
    }
    Tensor state = ctx.state;
    ops::step_state_add_loss(state, Tensor::from_vector(std::vector<double>{0.5}, {1}, DType::f32));
  }
  int64_t micro_batches() const override { return 1; }
  double evaluate(const TokenSource&, int64_t) override { return 0.0; }
  int64_t global_batch() const override { return 1; }
  int64_t seq_len() const override { return 1; }
  std::shared_ptr<ToyModel> model;
  std::vector<std::map<std::string, std::vector<double>>> grads;
  int calls = 0;
};

struct TimesN : Reductions {
  explicit TimesN(double n) : n(n) {}
  double allreduce_sum(double x) override { return n * x; }
  double allreduce_max(double x) override { return x; }
  double n;
};

// Records the order in which the trainer calls the gradient sync.
struct RecordingSync : GradientSync {
  explicit RecordingSync(std::vector<std::string>& o) : order(o) {}
  void begin_step() override { order.push_back("zero"); }
  void finish() override { order.push_back("complete"); }
  std::vector<std::string>& order;
};

TrainConfig sgd_config(Precision precision) {
  TrainConfig c;
  c.optimizer = OptimizerKind::sgd;
  c.lr = 1.0;
  c.momentum = 0.0;
  c.weight_decay = 0.0;
  c.clip = 1.0;
  c.precision = precision;
  c.steps = 2;
  return c;
}

TEST(TrainerStep, ReductionsHooksAndClippingInOrder) {
  auto model = std::make_shared<ToyModel>();
  auto src = std::make_unique<ScriptedSource>(model);
  ScriptedSource* s = src.get();
  s->grads = {{{"toy.w", {3, 0, 0, 0}}, {"toy.b", {0, 4}}}};  // local ‖g‖² = 25
  TrainerWiring wiring;
  wiring.source = std::move(src);
  wiring.reductions.loss = std::make_shared<TimesN>(2.0);  // two replicas with loss 0.5 each
  wiring.reductions.grad = std::make_shared<TimesN>(4.0);  // global ‖g‖² = 100 → norm 10
  std::vector<std::string> order;
  wiring.sync = std::make_shared<RecordingSync>(order);
  Trainer t(sgd_config(Precision::fp32), model, std::move(wiring));
  StepMetrics m = t.train_step();
  EXPECT_EQ(order, (std::vector<std::string>{"zero", "complete"}));
  EXPECT_EQ(s->calls, 1);
  EXPECT_EQ(m.step, 1);
  EXPECT_DOUBLE_EQ(m.loss, 1.0);
  EXPECT_DOUBLE_EQ(m.grad_norm, 10.0);  // reported before clipping
  EXPECT_FALSE(m.skipped);
  EXPECT_EQ(m.lr, 1.0);
  // SGD lr 1: w ← w − g·clip/(norm + 1e−6)
  const double coef = 1.0 / (10.0 + 1e-6);
  auto w = model->layer->w.to_double(), b = model->layer->b.to_double();
  EXPECT_NEAR(w[0], 1 - 3 * coef, 1e-6);
  EXPECT_EQ(w[1], 2.0);
  EXPECT_NEAR(b[1], -4 * coef, 1e-6);
  EXPECT_EQ(t.step(), 1);
}

TEST(TrainerStep, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  auto model = std::make_shared<ToyModel>();
  auto src = std::make_unique<ScriptedSource>(model);
  ScriptedSource* s = src.get();
  s->grads = {{{"toy.w", {INFINITY, 0, 0, 0}}, {"toy.b", {0, 0}}},
              {{"toy.w", {1e-3, 0, 0, 0}}, {"toy.b", {0, 2e-3}}}};
  TrainerWiring wiring;
  wiring.source = std::move(src);
  Trainer t(sgd_config(Precision::fp16), model, std::move(wiring));
  EXPECT_EQ(model->layer->w.dtype(), DType::f16);
  auto before = model->layer->w.to_double();
  StepMetrics m1 = t.train_step();
  EXPECT_TRUE(m1.skipped);
  EXPECT_EQ(m1.loss_scale, 65536.0);
  EXPECT_TRUE(std::isnan(m1.grad_norm));
  EXPECT_TRUE(m1.to_json()["grad_norm"].is_null());
  EXPECT_EQ(model->layer->w.to_double(), before);  // untouched
  EXPECT_EQ(t.optimizer().steps_taken(), 0);
  EXPECT_EQ(t.scaler().scale(), 32768.0);
  EXPECT_EQ(t.step(), 1);  // the data still moves on
  StepMetrics m2 = t.train_step();
  EXPECT_FALSE(m2.skipped);
  EXPECT_EQ(m2.loss_scale, 32768.0);
  // the gradient reaches the optimizer unscaled: g·scale rounded to f16 (as backward would
  // produce it), then divided by the scale in f32
  auto f16 = [](double x) { return static_cast<double>(f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(x)))); };
  const double g0 = f16(1e-3 * 32768) / 32768, g1 = f16(2e-3 * 32768) / 32768;
  EXPECT_NEAR(m2.grad_norm, std::sqrt(g0 * g0 + g1 * g1), 1e-9);
  EXPECT_NEAR(m2.grad_norm, std::sqrt(5e-6), 2e-6);
  EXPECT_EQ(t.optimizer().steps_taken(), 1);
  // SGD lr 1, no clipping (norm < 1): master w[0] = 1 − 1e-3 (up to the f16 rounding of the gradient)
  EXPECT_NEAR(t.optimizer().master(0).to_double()[0], 1 - g0, 1e-7);
}

// --cuda-graph 1 (the default) on the CPU: no graph there, the step runs eagerly (and trains)
TEST(TrainerStep, CudaGraphOnTheCpuRunsEagerly) {
  auto model = std::make_shared<ToyModel>();
  TrainerWiring wiring;
  auto source = std::make_unique<ScriptedSource>(model);
  source->grads = {{{"toy.w", {1e-3, 0, 0, 0}}, {"toy.b", {0, 0}}}};
  ScriptedSource* src = source.get();
  wiring.source = std::move(source);
  TrainConfig c = sgd_config(Precision::fp32);
  c.cuda_graph = true;
  Trainer t(c, model, std::move(wiring));
  EXPECT_FALSE(t.cuda_graph());
  t.train_step();
  EXPECT_EQ(src->calls, 1);
  EXPECT_EQ(t.optimizer().steps_taken(), 1);
}

}  // namespace
}  // namespace st::runtime
