// The training step captured once as a CUDA graph and replayed (see the header).
#include "runtime/train/cuda_graph_step.h"

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "ops/elementwise.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"
#include "tensor/memory_category.h"
#include "tensor/storage.h"

namespace st::runtime {
namespace {

// the two words the host writes before each step: lr (f64) and decay (f32, then padding)
constexpr size_t kLrWord = offsetof(ops::DeviceStepState, lr) / sizeof(int64_t);
static_assert(offsetof(ops::DeviceStepState, lr) % sizeof(int64_t) == 0 &&
                  offsetof(ops::DeviceStepState, decay) == offsetof(ops::DeviceStepState, lr) + sizeof(double),
              "lr and decay are two consecutive 8-byte words");
constexpr int64_t kStateWords = sizeof(ops::DeviceStepState) / sizeof(int64_t);
constexpr int64_t kSeedCapacity = 4096;  // dropout calls per step (GPT-2 124M: 25 per micro-batch)
// staging slot (i64 words): [lr, decay] [seeds (kSeedCapacity)] [K × (inputs B·T, targets B·T)]
constexpr int64_t kStageTokens = 2 + kSeedCapacity;

}  // namespace

std::string CudaGraphStep::refusal(const TrainConfig& cfg, bool one_process, const GradientSource* source) {
  if (!one_process) return "more than one process: the step's collectives are not captured";
  if (!dynamic_cast<const LocalGradientSource*>(source)) return "a pipeline's gradient source";
  if (cfg.optimizer != OptimizerKind::adamw) return "only AdamW has a device-scalar update";
  if (std::getenv("SHARDTRAIN_TEST_INF_STEP")) return "the SHARDTRAIN_TEST_INF_STEP hook picks steps on the host";
  return "";
}

CudaGraphStep::CudaGraphStep(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model,
                             LocalGradientSource& source, GradientSync& sync, Optimizer& opt, const LossScaler& scaler,
                             int64_t table_steps, bool capture)
    : cfg_(cfg),
      model_(std::move(model)),
      source_(source),
      sync_(sync),
      opt_(opt),
      device_(model_->parameters().front().device()),
      capture_(capture),
      seeds_(device_, kSeedCapacity) {
  ST_CHECK(!capture_ || device_ == Device::cuda, ValueError, "cuda graph: the model is on the CPU");
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
  bc1_ = Tensor::from_vector(bc1, {n}).to(device_);
  bc2_sqrt_ = Tensor::from_vector(bc2, {n}).to(device_);
  last_ = s;
  state_ = ops::step_state_tensor(s, device_);
  loss_factor_ = Tensor::zeros({}, DType::f32, device_);
  const int64_t B = cfg.micro_batch, T = source.seq_len(), K = cfg.grad_accum;
  for (int64_t k = 0; k < K; ++k) {
    inputs_.push_back(Tensor::zeros({B, T}, DType::i64, device_));
    targets_.push_back(Tensor::zeros({B, T}, DType::i64, device_));
  }
  for (int slot = 0; slot < 2; ++slot) {
    if (device_ == Device::cuda) {
      stage_buf_[slot] = std::make_unique<cuda::PinnedBuffer>((kStageTokens + 2 * K * B * T) * sizeof(int64_t));
      report_buf_[slot] = std::make_unique<cuda::PinnedBuffer>((kStateWords + DeviceGraph::kCheckWords) * sizeof(int64_t));
    }
    report_host_[slot].assign(kStateWords + DeviceGraph::kCheckWords, -1);
  }
}

CudaGraphStep::~CudaGraphStep() = default;  // the pinned buffers wait for their copies

void CudaGraphStep::stage(int64_t step, double lr, int slot) {
  ops::AdamWParams p = adam_;
  p.lr = static_cast<float>(lr);
  const double lr_d = ops::decimal_widen(p.lr);
  const float decay = ops::adamw_scalars(p, 1).decay;
  int64_t words[2] = {0, 0};
  std::memcpy(&words[0], &lr_d, sizeof lr_d);
  std::memcpy(&words[1], &decay, sizeof decay);
  const std::vector<int64_t> seeds = seeds_.set_step(step);  // the slots the warm-up registered
  const int64_t K = static_cast<int64_t>(inputs_.size());
  if (device_ != Device::cuda) {  // the eager CPU path: plain copies
    state_.narrow(0, static_cast<int64_t>(kLrWord), 2).copy_(Tensor::from_vector(std::vector<int64_t>{words[0], words[1]}, {2}));
    if (!seeds.empty())
      seeds_.table().narrow(0, 0, static_cast<int64_t>(seeds.size())).copy_(
          Tensor::from_vector(seeds, {static_cast<int64_t>(seeds.size())}));
    for (int64_t k = 0; k < K; ++k) {
      TokenBatch b = source_.micro_batch_host(step, k);
      inputs_[k].copy_(b.inputs);
      targets_[k].copy_(b.targets);
    }
    return;
  }
  cuda::PinnedBuffer& buf = *stage_buf_[slot];
  buf.wait();  // its uploads of two steps ago have read it
  int64_t* h = static_cast<int64_t*>(buf.data());
  h[0] = words[0];
  h[1] = words[1];
  std::copy(seeds.begin(), seeds.end(), h + 2);
  buf.upload_async(static_cast<int64_t*>(state_.data_ptr()) + kLrWord, 2 * sizeof(int64_t), 0);
  if (!seeds.empty()) buf.upload_async(seeds_.table().data_ptr(), seeds.size() * sizeof(int64_t), 2 * sizeof(int64_t));
  size_t off = kStageTokens * sizeof(int64_t);
  for (int64_t k = 0; k < K; ++k) {
    TokenBatch b = source_.micro_batch_host(step, k);
    for (auto [src, dst] : {std::pair{&b.inputs, &inputs_[k]}, std::pair{&b.targets, &targets_[k]}}) {
      const Tensor c = src->contiguous();
      ST_CHECK(c.dtype() == DType::i64 && c.numel() == dst->numel(), ValueError,
               "cuda graph: micro-batch " << k << " is " << c.describe() << ", expected " << dst->describe());
      const size_t bytes = static_cast<size_t>(c.numel()) * sizeof(int64_t);
      std::memcpy(static_cast<char*>(buf.data()) + off, c.data_ptr(), bytes);
      buf.upload_async(dst->data_ptr(), bytes, off);
      off += bytes;
    }
  }
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
    DropoutScope dropout_scope(step, k * B, &seeds_);  // the seeds: the table's slots, not `step`
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

void CudaGraphStep::collect(int slot) {
  if (device_ != Device::cuda) {
    std::memcpy(report_host_[slot].data(), state_.data_ptr(), kStateWords * sizeof(int64_t));
    return;
  }
  cuda::PinnedBuffer& rb = *report_buf_[slot];
  rb.download_async(state_.data_ptr(), kStateWords * sizeof(int64_t), 0);
  checks_[slot] = graph_.captured() && graph_.check_count() > 0;  // a replay's (the warm-up ran them inline)
  if (checks_[slot])
    rb.download_async(graph_.checks().data_ptr(), DeviceGraph::kCheckWords * sizeof(int64_t),
                      kStateWords * sizeof(int64_t));
}

void CudaGraphStep::launch(int64_t step, double lr) {
  ST_CHECK(step + 1 < table_size_, ValueError,
           "cuda graph: step " << step + 1 << " is past the " << table_size_ - 2 << " steps it was built for");
  ST_CHECK(queue_.size() < 2, ValueError, "cuda graph: two steps are pending; wait for step " << queue_.front() + 1);
  ST_CHECK(queue_.empty() || queue_.back() + 1 == step, ValueError,
           "cuda graph: step " << step + 1 << " launched after step " << queue_.back() + 1);
  const int slot = static_cast<int>(step % 2);
  stage(step, lr, slot);
  if (!capture_ || eager_steps_ == 0) {
    trace::Scope ts(capture_ ? "graph warm-up (eager)" : "device-state step (eager)", "compute");
    // the code a capture records must not read device values back: held to that here already,
    // where an error names the read instead of failing the capture
    HostReadGuard guard("a graph step's code (run eagerly)");
    body(step);
    ++eager_steps_;
  } else if (!graph_.captured()) {
    trace::Scope ts("graph capture", "compute");
    // the warm-up's blocks in the ordinary cache would sit beside the graph's own pool: give them
    // back so that the graph's step costs the memory of one step, as eager
    cuda::release_cached_blocks();
    graph_.capture([&] { body(step); });
    graph_.replay();
  } else {
    trace::Scope ts("graph replay", "compute");
    graph_.replay();
  }
  collect(slot);
  queue_.push_back(step);
}

GraphStepReport CudaGraphStep::wait(int64_t step) {
  ST_CHECK(!queue_.empty() && queue_.front() == step, ValueError,
           "cuda graph: waiting for step " << step + 1 << ", but "
                                           << (queue_.empty() ? std::string("none is pending")
                                                              : "the oldest pending is " + std::to_string(queue_.front() + 1)));
  queue_.erase(queue_.begin());
  const int slot = static_cast<int>(step % 2);
  const int64_t* h = report_host_[slot].data();
  if (device_ == Device::cuda) {
    report_buf_[slot]->wait();
    h = static_cast<const int64_t*>(report_buf_[slot]->data());
  }
  std::memcpy(&last_, h, sizeof last_);
  // a replay's deferred checks (the warm-up ran them inline); a failed one throws the op's error
  if (checks_[slot]) graph_.run_checks(h + kStateWords);
  GraphStepReport r;
  r.step = step;
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
