// Stopping on inf/NaN (runtime/train/nonfinite.h) through the real Trainer step, with a scripted
// gradient source: in fp32 a non-finite step never reaches the optimizer and
// --max-nonfinite-steps of them in a row stop the run with the step named; a finite step resets
// the count; 0 never stops; a NaN loss with finite gradients counts too; fp16 overflows count only
// once the loss scale is at its floor (65536 = 2^16 halves 16 times to 1, so with limit 1 the
// 17th overflow in a row stops). Also check_finite names the first bad tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/step_state.h"
#include "runtime/parallel/state_io.h"
#include "runtime/train/trainer.h"

namespace st::runtime {
namespace {

struct ToyLayer : Layer {
  ToyLayer() { w = register_parameter("w", Tensor::from_vector(std::vector<double>{1, 2}, {2})); }
  Tensor forward(const Tensor& x) override { return x; }
  LayerCost cost(int64_t) const override { return {}; }
  Tensor w;
};
struct ToyModel : LanguageModel {
  ToyModel() { add_layer("toy", layer = std::make_shared<ToyLayer>()); }
  std::string family() const override { return "toy"; }
  int64_t vocab_size() const override { return 2; }
  int64_t context_length() const override { return 1; }
  nlohmann::json config_json() const override { return nlohmann::json::object(); }
  void init_weights(uint64_t) override {}  // the weights are ToyLayer's {1, 2}
  std::shared_ptr<ToyLayer> layer;
};

// Step s (from 0) writes loss_scale × grads[s] (inf where bad[s]) and adds loss[s] (0.5 if unset).
struct ScriptedSource : GradientSource {
  explicit ScriptedSource(std::shared_ptr<ToyModel> m) : model(std::move(m)) {}
  void compute_gradients(const StepContext& ctx, GradientSync&) override {
    const int64_t step = ctx.step;
    const double loss_scale = ctx.loss_factor.item();  // scale / (K·dp), K = dp = 1 here
    const bool inf = bad.count(step + 1) > 0;
    auto& p = model->layer->w;
    p.set_grad(Tensor::from_vector(std::vector<double>{inf ? INFINITY : 0.1 * loss_scale, 0.0}, {2}, p.dtype()));
    Tensor state = ctx.state;
    const double loss = nan_loss.count(step + 1) ? NAN : 0.5;
    ops::step_state_add_loss(state, Tensor::from_vector(std::vector<double>{loss}, {1}, DType::f32));
  }
  int64_t micro_batches() const override { return 1; }
  double evaluate(const TokenSource&, int64_t) override { return 0.5; }  // never called: no --val-data
  int64_t global_batch() const override { return 1; }
  int64_t seq_len() const override { return 1; }
  std::shared_ptr<ToyModel> model;
  std::set<int64_t> bad, nan_loss;  // steps from 1
};

struct ToyRun {
  std::shared_ptr<ToyModel> model = std::make_shared<ToyModel>();
  ScriptedSource* source = nullptr;
  std::unique_ptr<Trainer> trainer;
  ToyRun(Precision precision, int64_t max_nonfinite, std::set<int64_t> bad, std::set<int64_t> nan_loss = {}) {
    TrainConfig c;
    c.optimizer = OptimizerKind::sgd;
    c.lr = 1.0;
    c.momentum = 0.0;
    c.clip = 0.0;
    c.precision = precision;
    c.steps = 40;
    c.max_nonfinite_steps = max_nonfinite;
    auto src = std::make_unique<ScriptedSource>(model);
    source = src.get();
    source->bad = std::move(bad);
    source->nan_loss = std::move(nan_loss);
    TrainerWiring w;
    w.source = std::move(src);
    trainer = std::make_unique<Trainer>(c, model, std::move(w));
  }
  double w0() const { return trainer->optimizer().master(0).to_double()[0]; }
};

// The message of the error the step throws, "" when it does not throw.
std::string step_error(Trainer& t) {
  try {
    t.train_step();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(NonFinite, Fp32StopsAtTheFirstInfStepByDefault) {
  ToyRun s(Precision::fp32, 1, {2});
  EXPECT_EQ(step_error(*s.trainer), "");
  const double after_step1 = s.w0();
  EXPECT_FLOAT_EQ(after_step1, 1 - 0.1);  // SGD lr 1 on g 0.1, in f32 (within 4 ulps)
  EXPECT_EQ(step_error(*s.trainer),
            "step 2: the gradients hold inf/NaN (fp32 has no loss scaler to skip it); stopping after 1 non-finite "
            "step — see --max-nonfinite-steps");
  EXPECT_EQ(s.w0(), after_step1);  // the bad gradient never reached the weights
  EXPECT_EQ(s.trainer->optimizer().steps_taken(), 1);
}

TEST(NonFinite, Bf16NanLossStopsWithTheLossNamed) {
  ToyRun s(Precision::bf16, 1, {}, {3});
  EXPECT_EQ(step_error(*s.trainer), "");
  EXPECT_EQ(step_error(*s.trainer), "");
  EXPECT_EQ(step_error(*s.trainer),
            "step 3: loss is nan (bf16 has no loss scaler to skip it); stopping after 1 non-finite step — see "
            "--max-nonfinite-steps");
}

TEST(NonFinite, CountsStepsInARowAndAFiniteStepResets) {
  ToyRun s(Precision::fp32, 3, {2, 3, 5, 6, 7});
  for (int step = 1; step <= 6; ++step) EXPECT_EQ(step_error(*s.trainer), "") << "step " << step;
  // steps 1 and 4 stepped; 2, 3, 5, 6 were skipped: the weights moved twice
  EXPECT_EQ(s.trainer->optimizer().steps_taken(), 2);
  EXPECT_FLOAT_EQ(s.w0(), 1 - 0.2);  // f32, within 4 ulps
  EXPECT_EQ(step_error(*s.trainer),
            "step 7: the gradients hold inf/NaN (fp32 has no loss scaler to skip it); stopping after 3 non-finite "
            "steps in a row (steps 5-7) — see --max-nonfinite-steps");
}

TEST(NonFinite, ZeroNeverStopsAndSkipsEveryBadStep) {
  ToyRun s(Precision::fp32, 0, {1, 2, 3, 4, 5, 6, 7, 8});
  for (int step = 1; step <= 8; ++step) {
    StepMetrics m = s.trainer->train_step();
    EXPECT_TRUE(m.skipped);
    EXPECT_TRUE(m.to_json()["grad_norm"].is_null());
  }
  EXPECT_EQ(s.w0(), 1.0);
  EXPECT_EQ(s.trainer->optimizer().steps_taken(), 0);
}

TEST(NonFinite, Fp16CountsOnlyOverflowsAtTheScaleFloor) {
  std::set<int64_t> all;
  for (int64_t i = 1; i <= 40; ++i) all.insert(i);
  ToyRun s(Precision::fp16, 1, all);
  for (int step = 1; step <= 16; ++step) {  // 65536 → 1 by halving, each overflow skipped
    EXPECT_EQ(step_error(*s.trainer), "") << "step " << step;
    EXPECT_EQ(s.trainer->scaler().scale(), std::ldexp(1.0, 16 - step));
  }
  EXPECT_EQ(step_error(*s.trainer),
            "step 17: the gradients still overflow with the fp16 loss scale at its floor (try --precision bf16); "
            "stopping after 1 non-finite step — see --max-nonfinite-steps");
}

TEST(NonFinite, CheckFiniteNamesTheFirstBadTensor) {
  NamedTensors t = {{"a", Tensor::from_vector(std::vector<double>{1, 2}, {2})},
                    {"step", Tensor::from_vector(std::vector<int64_t>{3}, {1})},
                    {"b", Tensor::from_vector(std::vector<double>{1, NAN}, {2})},
                    {"c", Tensor::from_vector(std::vector<double>{INFINITY}, {1}).to(DType::bf16)}};
  EXPECT_NO_THROW(check_finite({t[0], t[1]}, "x"));
  try {
    check_finite(t, "ckpt/model.safetensors");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "ckpt/model.safetensors: tensor 'b' holds inf or NaN");
  }
  EXPECT_THROW(check_finite({t[3]}, "x"), ValueError);
}

}  // namespace
}  // namespace st::runtime
