// One training step, eager or captured (see the header).
#include "runtime/train/train_step.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <iostream>
#include <limits>

#include "ops/elementwise.h"
#include "runtime/common/stop_request.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"
#include "tensor/memory_category.h"
#include "tensor/storage.h"

namespace st::runtime {
namespace {

// the two words the host writes before each step: lr (f64), then decay (f32) and snapshot (i32)
constexpr size_t kLrWord = offsetof(ops::DeviceStepState, lr) / sizeof(int64_t);
static_assert(offsetof(ops::DeviceStepState, lr) % sizeof(int64_t) == 0 &&
                  offsetof(ops::DeviceStepState, decay) == offsetof(ops::DeviceStepState, lr) + sizeof(double) &&
                  offsetof(ops::DeviceStepState, snapshot) == offsetof(ops::DeviceStepState, decay) + sizeof(float),
              "lr, then decay and snapshot, are two consecutive 8-byte words");
constexpr int64_t kStateWords = sizeof(ops::DeviceStepState) / sizeof(int64_t);
constexpr int64_t kSeedCapacity = 4096;  // dropout calls per step (GPT-2 124M: 25 per micro-batch)
// staging slot (i64 words): [lr, decay] [seeds (kSeedCapacity)] [K × (inputs B·T, targets B·T)]
constexpr int64_t kStageTokens = 2 + kSeedCapacity;

// end_step's question, answered from the state when a sync asks (ZeRO-1/2: a host read)
class StateOutcome : public StepOutcome {
 public:
  explicit StateOutcome(const Tensor& state) : state_(state) {}
  bool stepped() const override { return ops::step_state_download(state_).skip == 0; }

 private:
  const Tensor& state_;
};

}  // namespace

std::function<void(int64_t, int, std::vector<Tensor>&)> infinite_gradient(int64_t from, bool onward, int rank) {
  return [=](int64_t step, int me, std::vector<Tensor>& grads) {
    if (grads.empty() || (onward ? step < from : step != from) || (rank >= 0 && rank != me)) return;
    NoGradGuard ng;
    grads[0].flatten().narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  };
}

std::string TrainStep::capture_refusal(const StepParts& p) {
  const StepReductions& r = p.reductions;
  if (!r.loss->identity() || !r.grad->identity() || !r.flag->identity() || !p.sync->capturable())
    return "more than one process: the step's collectives are not captured";
  if (std::string why = p.source->capture_refusal(); !why.empty()) return why;
  if (!p.opt->device_scalars()) return "only AdamW has a device-scalar update";
  if (p.seams.after_gradients) return "a test seam changes gradients on steps the host picks";
  return "";
}

TrainStep::TrainStep(StepParts parts, const StepConstants& constants, const LossScaler& scaler, int64_t table_steps,
                     StepMode mode)
    : p_(std::move(parts)), c_(constants), mode_(mode), device_(p_.model->parameters().front().device()) {
  ST_CHECK(p_.source && p_.sync && p_.opt && p_.reductions.loss && p_.reductions.grad && p_.reductions.flag,
           ValueError, "train step: a part of the wiring is missing");
  ST_CHECK(mode_ != StepMode::graph || device_ == Device::cuda, ValueError, "cuda graph: the model is on the CPU");
  if (mode_ != StepMode::eager) {
    const std::string why = capture_refusal(p_);
    ST_CHECK(why.empty(), ValueError, "cuda graph: " << why);
  }
  ops::DeviceStepState s;
  s.loss_scale = scaler.scale();
  s.good_steps = scaler.good_steps();
  s.opt_step = p_.opt->steps_taken();
  s.divisor = c_.divisor;
  s.clip = c_.clip;
  s.min_scale = scaler.min_scale();
  s.growth_interval = scaler.growth_interval();
  s.scaler_enabled = scaler.enabled() ? 1 : 0;
  const ops::AdamWScalars a = ops::adamw_scalars(c_.adam, 1);  // the step-independent fields
  s.lerp_w = a.lerp_w;
  s.beta2 = a.beta2;
  s.one_minus_b2 = a.one_minus_b2;
  s.eps = a.eps;
  state_ = ops::step_state_tensor(s, device_);
  last_ = s;
  // --precision fp8: every FP8 cast of the model adds its overflow / underflow counts into the
  // state's two count words, which step_state_begin zeroes and the report carries (a kernel's
  // atomics into a fixed device address: a captured step's replays count again, nothing is baked)
  const Tensor fp8_counts = ops::step_state_fp8_counts(state_);
  for (const auto& fp8 : p_.model->fp8_states()) fp8->counts = fp8_counts;
  if (const auto named = p_.model->fp8_named_states(); fp8_delayed(named))
    fp8_delayed_ = std::make_unique<Fp8DelayedScaling>(named, p_.fp8_amax_group);
  grow_tables(std::max<int64_t>(table_steps, p_.opt->steps_taken()));
  loss_factor_ = Tensor::zeros({}, DType::f32, device_);
  const int64_t K = p_.source->micro_batches();
  // B: the global batch is B · K · dp sequences and the divisor K · dp · cp (only one process
  // stages micro-batches: capture_refusal, so cp is 1 there)
  const int64_t B = p_.source->global_batch() * c_.cp / static_cast<int64_t>(c_.divisor), T = p_.source->seq_len();
  if (mode_ != StepMode::eager) {
    seeds_ = std::make_unique<DropoutSeedTable>(device_, kSeedCapacity);
    for (int64_t k = 0; k < K; ++k)
      staged_.push_back({Tensor::zeros({B, T}, DType::i64, device_), Tensor::zeros({B, T}, DType::i64, device_)});
  }
  for (int slot = 0; slot < 2; ++slot) {
    if (device_ == Device::cuda) {
      const int64_t tokens = mode_ == StepMode::eager ? 0 : 2 * K * B * T;
      stage_buf_[slot] = std::make_unique<cuda::PinnedBuffer>((kStageTokens + tokens) * sizeof(int64_t));
      report_buf_[slot] = std::make_unique<cuda::PinnedBuffer>((kStateWords + DeviceGraph::kCheckWords) * sizeof(int64_t));
    }
    report_host_[slot].assign(kStateWords + DeviceGraph::kCheckWords, -1);
  }
}

TrainStep::~TrainStep() = default;  // the pinned buffers wait for their copies

void TrainStep::grow_tables(int64_t steps) {
  // t = 0 … steps + 1: adamw_scalars' own expressions (t = 0 is never used)
  const int64_t n = steps + 2;
  std::vector<int64_t> bc1(n);
  std::vector<float> bc2(n, 1.f);
  const double b1 = ops::decimal_widen(c_.adam.beta1);
  for (int64_t t = 0; t < n; ++t) {
    const double v = 1.0 - std::pow(b1, static_cast<double>(t));
    std::memcpy(&bc1[t], &v, sizeof v);
    if (t >= 1) bc2[t] = ops::adamw_scalars(c_.adam, t).bc2_sqrt;
  }
  bc1_ = Tensor::from_vector(bc1, {n}).to(device_);
  bc2_sqrt_ = Tensor::from_vector(bc2, {n}).to(device_);
  table_size_ = n;
  // the state's own copy of the size (step_state_decide clamps t to it)
  ops::DeviceStepState s = ops::step_state_download(state_);
  s.table_size = n;
  ops::step_state_upload(state_, s);
}

StepContext TrainStep::context(int64_t step) {
  StepContext ctx;
  ctx.step = step;
  ctx.loss_factor = loss_factor_;
  ctx.state = state_;
  ctx.seeds = seeds_.get();
  ctx.staged = staged_.empty() ? nullptr : &staged_;
  return ctx;
}

void TrainStep::stage(int64_t step, double lr, bool snapshot, int slot) {
  ops::AdamWParams a = c_.adam;
  a.lr = static_cast<float>(lr);
  const double lr_d = ops::decimal_widen(a.lr);
  const float decay = ops::adamw_scalars(a, 1).decay;
  int64_t words[2] = {0, 0};
  std::memcpy(&words[0], &lr_d, sizeof lr_d);
  std::memcpy(&words[1], &decay, sizeof decay);
  const int32_t snap = snapshot ? 1 : 0;
  std::memcpy(reinterpret_cast<char*>(&words[1]) + sizeof decay, &snap, sizeof snap);
  const std::vector<int64_t> seeds = seeds_ ? seeds_->set_step(step) : std::vector<int64_t>{};  // the slots the warm-up registered
  const int64_t K = static_cast<int64_t>(staged_.size());
  if (device_ != Device::cuda) {  // plain copies
    state_.narrow(0, static_cast<int64_t>(kLrWord), 2).copy_(Tensor::from_vector(std::vector<int64_t>{words[0], words[1]}, {2}));
    if (!seeds.empty())
      seeds_->table().narrow(0, 0, static_cast<int64_t>(seeds.size())).copy_(
          Tensor::from_vector(seeds, {static_cast<int64_t>(seeds.size())}));
    for (int64_t k = 0; k < K; ++k) {
      TokenBatch b = p_.source->micro_batch_host(step, k);
      staged_[k].inputs.copy_(b.inputs);
      staged_[k].targets.copy_(b.targets);
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
  if (!seeds.empty()) buf.upload_async(seeds_->table().data_ptr(), seeds.size() * sizeof(int64_t), 2 * sizeof(int64_t));
  size_t off = kStageTokens * sizeof(int64_t);
  for (int64_t k = 0; k < K; ++k) {
    TokenBatch b = p_.source->micro_batch_host(step, k);
    for (auto [src, dst] : {std::pair{&b.inputs, &staged_[k].inputs}, std::pair{&b.targets, &staged_[k].targets}}) {
      const Tensor c = src->contiguous();
      ST_CHECK(c.dtype() == DType::i64 && c.numel() == dst->numel(), ValueError,
               "train step: micro-batch " << k << " is " << c.describe() << ", expected " << dst->describe());
      const size_t bytes = static_cast<size_t>(c.numel()) * sizeof(int64_t);
      std::memcpy(static_cast<char*>(buf.data()) + off, c.data_ptr(), bytes);
      buf.upload_async(dst->data_ptr(), bytes, off);
      off += bytes;
    }
  }
}

void TrainStep::body(int64_t step) {
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    p_.sync->begin_step();
  }
  ops::step_state_begin(state_, loss_factor_);
  {
    MemoryCategoryScope mem(MemoryCategory::activations);  // parameters' .grad() are counted as grads (autograd)
    p_.source->compute_gradients(context(step), *p_.sync);
  }
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    p_.sync->finish();
  }
  std::vector<Tensor> grads;  // the raw gradients (dtype as accumulated, loss-scaled), aligned with the optimizer's params
  {
    NoGradGuard ng;
    grads.reserve(p_.opt->size());
    for (auto& [name, p] : p_.opt->params()) {
      Tensor g = p.grad();
      if (!g.defined()) g = Tensor::zeros(p.shape(), DType::f32, p.device());  // unused parameter: zero gradient
      grads.push_back(g);
    }
  }
  if (p_.seams.after_gradients) p_.seams.after_gradients(step + 1, p_.rank, grads);
  // One pass over every gradient in its own dtype: this rank's unscaled weighted Σg² and inf/NaN
  // flag. Unscaling and clipping happen inside the optimizer's kernels.
  ops::grad_stats_to_state(grads, p_.norm_weights, state_);
  combine(static_cast<int>(step % 2));
  ops::step_state_decide(state_, bc1_, bc2_sqrt_);
  {
    trace::Scope ts("optimizer step", "optimizer");
    MemoryCategoryScope mem(MemoryCategory::optim);
    p_.opt->step_on_device(grads, state_);
  }
  grads.clear();
  p_.sync->end_step(StateOutcome(state_));
  // --fp8-scaling delayed: the step's amaxes agreed over the stage, the next step's scales set
  if (fp8_delayed_) fp8_delayed_->update();
}

void TrainStep::combine(int slot) {
  const StepReductions& r = p_.reductions;
  stop_[slot] = 0;
  if (r.loss->identity() && r.grad->identity() && r.flag->identity()) return;
  ops::DeviceStepState s = ops::step_state_download(state_);  // the step's one host read
  // the inf/NaN verdict agreed by every rank (a rank's own gradients may be the only bad ones),
  // and in the same all-reduce the stop request (a signal number, 0 none: any rank's stops all
  // after this step); then the loss and Σg² over the groups holding their different parts (reductions.h)
  const std::array<double, 2> flags =
      r.flag->allreduce_max_pair({s.found_inf ? 1.0 : 0.0, static_cast<double>(stop_signal())});
  s.found_inf = flags[0] > 0.0 ? 1 : 0;
  stop_[slot] = static_cast<int>(flags[1]);
  s.loss_sum = r.loss->allreduce_sum(s.loss_sum);
  s.sumsq = r.grad->allreduce_sum(s.sumsq);
  ops::step_state_upload(state_, s);
}

void TrainStep::collect(int slot) {
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

void TrainStep::launch(int64_t step, double lr, bool snapshot) {
  if (step + 1 >= table_size_) {
    ST_CHECK(!graph_.captured(), ValueError,
             "cuda graph: step " << step + 1 << " is past the " << table_size_ - 2 << " steps it was built for");
    grow_tables(2 * (step + 1));
  }
  ST_CHECK(queue_.size() < 2, ValueError, "train step: two steps are pending; wait for step " << queue_.front() + 1);
  ST_CHECK(queue_.empty() || queue_.back() + 1 == step, ValueError,
           "train step: step " << step + 1 << " launched after step " << queue_.back() + 1);
  const int slot = static_cast<int>(step % 2);
  stage(step, lr, snapshot, slot);
  if (mode_ == StepMode::eager) {
    body(step);
  } else if (mode_ == StepMode::rehearsal || eager_steps_ == 0) {
    trace::Scope ts(mode_ == StepMode::graph ? "graph warm-up (eager)" : "graph rehearsal (eager)", "compute");
    // the code a capture records must not read device values back: held to that here already,
    // where an error names the read instead of failing the capture
    try {
      HostReadGuard guard("a graph step's code (run eagerly)");
      body(step);
    } catch (const CaptureError& e) {
      // The warm-up (nothing captured or pending yet) read a device value back: this model's step
      // cannot be a graph. It runs eagerly from here on, this step included: the failed warm-up
      // changed nothing the eager step reads (its gradients are cleared first, the state's
      // per-step fields are reset by step_state_begin, the read came before the optimizer).
      if (!queue_.empty() || eager_steps_ > 0) throw;
      fallback_ = e.what();
      mode_ = StepMode::eager;
      seeds_.reset();
      staged_.clear();
      body(step);
    }
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

StepReport TrainStep::wait(int64_t step) {
  ST_CHECK(!queue_.empty() && queue_.front() == step, ValueError,
           "train step: waiting for step " << step + 1 << ", but "
                                           << (queue_.empty() ? std::string("none is pending")
                                                              : "the oldest pending is " + std::to_string(queue_.front() + 1)));
  queue_.erase(queue_.begin());
  const int slot = static_cast<int>(step % 2);
  const int64_t* h = report_host_[slot].data();
  if (device_ == Device::cuda) {
    report_buf_[slot]->wait();
    h = static_cast<const int64_t*>(report_buf_[slot]->data());
  }
  static_assert(std::is_trivially_copyable_v<ops::DeviceStepState>);
  std::memcpy(static_cast<void*>(&last_), h, sizeof last_);  // the words the step wrote, as laid out on the device
  // a replay's deferred checks (the warm-up ran them inline); a failed one throws the op's error
  if (checks_[slot]) graph_.run_checks(h + kStateWords);
  StepReport r;
  r.step = step;
  r.loss = last_.rep_loss;
  r.grad_norm = last_.rep_norm;
  r.loss_scale = last_.rep_scale;
  r.skipped = last_.rep_skipped != 0;
  r.found_inf = last_.rep_found_inf != 0;
  r.at_floor = last_.rep_at_floor != 0;
  r.fp8_overflow = last_.fp8_overflow;
  r.fp8_underflow = last_.fp8_underflow;
  const StepReductions& red = p_.reductions;
  const bool one_process = red.loss->identity() && red.grad->identity() && red.flag->identity();
  r.stop_signal = one_process ? stop_signal() : stop_[slot];
  if (r.at_floor && !warned_) {  // LossScaler::update's warning
    std::cerr << "warning: fp16 loss scale is at its floor (" << last_.min_scale
              << ") and gradients still overflow; steps keep being skipped (try --precision bf16)\n";
    warned_ = true;
  }
  return r;
}

void TrainStep::write_back(LossScaler& scaler, Optimizer& opt) const {
  scaler.set_state(last_.loss_scale, last_.good_steps);
  opt.set_steps_taken(last_.opt_step);
}

}  // namespace st::runtime
