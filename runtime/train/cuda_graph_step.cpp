// The training step captured once as a CUDA graph and replayed (see the header).
#include "runtime/train/cuda_graph_step.h"

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "ops/elementwise.h"
#include "ops/step_state.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"
#include "tensor/memory_category.h"

namespace st::runtime {
namespace {

// the two words the host writes before each step: lr (f64) and decay (f32, then padding)
constexpr size_t kLrWord = offsetof(ops::DeviceStepState, lr) / sizeof(int64_t);
static_assert(offsetof(ops::DeviceStepState, lr) % sizeof(int64_t) == 0 &&
                  offsetof(ops::DeviceStepState, decay) == offsetof(ops::DeviceStepState, lr) + sizeof(double),
              "lr and decay are two consecutive 8-byte words");

bool has_dropout(const nlohmann::json& config) {
  for (const auto& [key, value] : config.items())
    if (key.find("drop") != std::string::npos && value.is_number() && value.get<double>() > 0) return true;
  return false;
}

}  // namespace

std::string CudaGraphStep::refusal(const TrainConfig& cfg, const LanguageModel& model, bool one_process,
                                   const GradientSource* source) {
  if (!one_process) return "more than one process: the step's collectives are not captured";
  if (!dynamic_cast<const LocalGradientSource*>(source)) return "a pipeline's gradient source";
  if (cfg.optimizer != OptimizerKind::adamw) return "only AdamW has a device-scalar update";
  if (has_dropout(model.config_json())) return "dropout > 0: its masks are keyed by the step on the host";
  if (std::getenv("SHARDTRAIN_TEST_INF_STEP")) return "the SHARDTRAIN_TEST_INF_STEP hook picks steps on the host";
  return "";
}

CudaGraphStep::CudaGraphStep(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model,
                             LocalGradientSource& source, GradientSync& sync, Optimizer& opt, const LossScaler& scaler,
                             int64_t table_steps)
    : cfg_(cfg), model_(std::move(model)), source_(source), sync_(sync), opt_(opt) {
  adam_ = {static_cast<float>(cfg.lr), static_cast<float>(cfg.beta1), static_cast<float>(cfg.beta2),
           static_cast<float>(cfg.eps), static_cast<float>(cfg.weight_decay)};
  ops::DeviceStepState s;
  s.loss_scale = scaler.scale();
  s.good_steps = scaler.good_steps();
  s.opt_step = opt.steps_taken();
  s.divisor = static_cast<double>(cfg.grad_accum);  // K · dp with dp = 1
  s.clip = cfg.clip;
  s.min_scale = scaler.min_scale();
  s.growth_interval = scaler.growth_interval();
  s.scaler_enabled = scaler.enabled() ? 1 : 0;
  const ops::AdamWScalars c = ops::adamw_scalars(adam_, 1);  // the step-independent fields
  s.lerp_w = c.lerp_w;
  s.beta2 = c.beta2;
  s.one_minus_b2 = c.one_minus_b2;
  s.eps = c.eps;
  // t = 0 … table_steps + 1: adamw_scalars' own expressions (t = 0 is never used)
  const int64_t n = std::max<int64_t>(table_steps, opt.steps_taken()) + 2;
  s.table_size = n;
  table_size_ = n;
  std::vector<int64_t> bc1(n);
  std::vector<float> bc2(n, 1.f);
  const double b1 = ops::decimal_widen(adam_.beta1);
  for (int64_t t = 0; t < n; ++t) {
    const double v = 1.0 - std::pow(b1, static_cast<double>(t));
    std::memcpy(&bc1[t], &v, sizeof v);
    if (t >= 1) bc2[t] = ops::adamw_scalars(adam_, t).bc2_sqrt;
  }
  bc1_ = Tensor::from_vector(bc1, {n}).to(Device::cuda);
  bc2_sqrt_ = Tensor::from_vector(bc2, {n}).to(Device::cuda);
  state_ = ops::step_state_tensor(s);
  loss_factor_ = Tensor::zeros({}, DType::f32, Device::cuda);
  const int64_t B = cfg.micro_batch, T = source.seq_len();
  for (int64_t k = 0; k < cfg.grad_accum; ++k) {
    inputs_.push_back(Tensor::zeros({B, T}, DType::i64, Device::cuda));
    targets_.push_back(Tensor::zeros({B, T}, DType::i64, Device::cuda));
  }
  for (size_t i = 0; i < opt.size(); ++i) decays_.push_back(opt.decays(i));
}

void CudaGraphStep::body(int64_t step) {
  const int64_t K = static_cast<int64_t>(inputs_.size()), B = cfg_.micro_batch;
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    sync_.begin_step();
  }
  ops::step_state_begin(state_, loss_factor_);
  for (int64_t k = 0; k < K; ++k) {
    MemoryCategoryScope mem(MemoryCategory::activations);
    DropoutScope dropout_scope(step, k * B);
    Tensor loss = model_->loss(model_->forward(inputs_[k]), targets_[k]);  // () f32, micro-batch mean
    Tensor scaled = ops::mul(loss, loss_factor_);  // = ops::scale(loss, float(scale / K)) bit for bit
    if (k == K - 1) sync_.last_backward();
    scaled.backward();
    ops::step_state_add_loss(state_, loss.detach());
  }
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    sync_.finish();
  }
  std::vector<Tensor> grads;
  {
    NoGradGuard ng;
    for (auto& [name, p] : opt_.params()) {
      Tensor g = p.grad();
      if (!g.defined()) g = Tensor::zeros(p.shape(), DType::f32, p.device());  // unused parameter
      grads.push_back(g);
    }
  }
  ops::grad_stats_to_state(grads, {}, state_);
  ops::step_state_decide(state_, bc1_, bc2_sqrt_);
  {
    MemoryCategoryScope mem(MemoryCategory::optim);
    opt_.step_on_device(grads, state_);
  }
  grads.clear();
  sync_.end_step(/*stepped=*/true);  // ClearGrads: the gradients go (set to none) either way
}

GraphStepReport CudaGraphStep::run(int64_t step, double lr) {
  ST_CHECK(step + 1 < table_size_, ValueError,
           "cuda graph: step " << step + 1 << " is past the " << table_size_ - 2 << " steps it was built for");
  for (size_t k = 0; k < inputs_.size(); ++k) {  // the micro-batches into the buffers the graph reads
    TokenBatch b = source_.micro_batch(step, static_cast<int64_t>(k));
    inputs_[k].copy_(b.inputs);
    targets_[k].copy_(b.targets);
  }
  ops::AdamWParams p = adam_;
  p.lr = static_cast<float>(lr);
  const double lr_d = ops::decimal_widen(p.lr);
  const float decay = ops::adamw_scalars(p, 1).decay;
  int64_t words[2] = {0, 0};
  std::memcpy(&words[0], &lr_d, sizeof lr_d);
  std::memcpy(&words[1], &decay, sizeof decay);
  state_.narrow(0, static_cast<int64_t>(kLrWord), 2).copy_(Tensor::from_vector(std::vector<int64_t>{words[0], words[1]}, {2}));
  if (eager_steps_ == 0) {
    trace::Scope ts("graph warm-up (eager)", "compute");
    body(step);
    ++eager_steps_;
  } else if (!graph_.captured()) {
    trace::Scope ts("graph capture", "compute");
    graph_.capture([&] { body(step); });
    graph_.replay();
  } else {
    trace::Scope ts("graph replay", "compute");
    graph_.replay();
  }
  last_ = ops::step_state_download(state_);  // waits for the step (after it, outside the graph)
  GraphStepReport r;
  r.loss = last_.rep_loss;
  r.grad_norm = last_.rep_norm;
  r.loss_scale = last_.rep_scale;
  r.skipped = last_.rep_skipped != 0;
  r.found_inf = last_.rep_found_inf != 0;
  r.at_floor = last_.rep_at_floor != 0;
  if (r.at_floor && !warned_) {  // LossScaler::update's warning
    std::cerr << "warning: fp16 loss scale is at its floor (" << last_.min_scale
              << ") and gradients still overflow; steps keep being skipped (try --precision bf16)\n";
    warned_ = true;
  }
  return r;
}

void CudaGraphStep::write_back(LossScaler& scaler, Optimizer& opt) const {
  scaler.set_state(last_.loss_scale, last_.good_steps);
  opt.set_steps_taken(last_.opt_step);
}

}  // namespace st::runtime
