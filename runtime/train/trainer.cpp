// The training loop (see the header for the step order).
#include "runtime/train/trainer.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "ops/optim.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/optim/grad_clip.h"
#include "runtime/common/timing.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/trace.h"
#include "runtime/train/memory_check.h"
#include "runtime/train/model_registry.h"
#include "runtime/train/nonfinite.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, NamedTensors params, DType compute) {
  switch (cfg.optimizer) {
    case OptimizerKind::adamw:
      return std::make_unique<AdamW>(std::move(params),
                                     AdamWOptions{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}, compute);
    case OptimizerKind::sgd:
      return std::make_unique<Sgd>(std::move(params), SgdOptions{cfg.lr, cfg.momentum, cfg.weight_decay}, compute);
  }
  ST_THROW(ValueError, "optimizer " << static_cast<int>(cfg.optimizer) << " is not known");
}

// Test hook (documented in docs/testing.md): SHARDTRAIN_TEST_INF_STEP=s (from 1; "s+": every step
// from s on) and SHARDTRAIN_TEST_INF_RANK=r make rank r's first gradient infinite at step s, to
// check that every rank skips the step together, the loss scale halves, and a run that stays
// non-finite stops.
void maybe_inject_overflow(std::vector<Tensor>& grads, int64_t step, int rank) {
  const char* at_step = std::getenv("SHARDTRAIN_TEST_INF_STEP");
  const char* at_rank = std::getenv("SHARDTRAIN_TEST_INF_RANK");
  if (!at_step || grads.empty()) return;
  const std::string s = at_step;
  const bool onward = !s.empty() && s.back() == '+';
  const int64_t from = std::atoll(s.c_str());
  if (onward ? step < from : step != from) return;
  if (at_rank && std::atoi(at_rank) != rank) return;
  NoGradGuard ng;
  grads[0].flatten().narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
}

}  // namespace

TrainInputs prepare_training(const TrainConfig& cfg, int64_t dp, int64_t replica,
                             std::shared_ptr<comm::Communicator> tp) {
  ST_CHECK(!cfg.data.empty(), ValueError, "train: no token file (--data)");
  TrainInputs in;
  if (cfg.resume) {
    ST_CHECK(!cfg.checkpoint_dir.empty(), ValueError, "--resume needs --checkpoint-dir");
    in.resume_path = CheckpointDir(cfg.checkpoint_dir).latest();
  }
  Generator init_gen(cfg.seed);
  if (!in.resume_path.empty()) {
    TrainState st = TrainState::from_json(read_state(in.resume_path), in.resume_path + "/state.json");
    in.model = build_model_from_json(st.model, tp);
    ST_CHECK(in.model->family() == cfg.model, ValueError,
             "--resume: the checkpoint " << in.resume_path << " holds a " << in.model->family()
                                         << " model, --model is " << cfg.model);
  } else {
    check_fits_in_memory(cfg, tp ? tp->size() : 1, dp);  // before a single parameter is allocated
    in.model = build_model(cfg, init_gen, tp);
    if (!cfg.init_from.empty()) check_finite(in.model->named_parameters(), "--init-from " + cfg.init_from);
  }
  in.device = cfg.device;
  in.data = std::make_shared<TokenData>(cfg.data);
  const int64_t max_tok = in.data->max_token();
  ST_CHECK(max_tok < in.model->vocab_size(), ValueError,
           cfg.data << " holds token id " << max_tok << ", outside the model's vocabulary of "
                    << in.model->vocab_size());
  in.layout.micro_batch = cfg.micro_batch;
  in.layout.grad_accum = cfg.grad_accum;
  in.layout.dp = dp;
  in.layout.replica = replica;
  in.layout.seq_len = cfg.seq_len > 0 ? cfg.seq_len : in.model->context_length();
  ST_CHECK(in.layout.seq_len <= in.model->context_length(), ValueError,
           "--seq-len " << in.layout.seq_len << " exceeds the model's context length "
                        << in.model->context_length());
  in.model->move_parameters(in.device);
  return in;
}

Trainer::Trainer(const TrainConfig& cfg) : cfg_(cfg) {
  ST_CHECK(cfg.tp == 1 && cfg.pp == 1 && (cfg.dp == 0 || cfg.dp == 1), ValueError,
           "the single-process trainer runs dp = tp = pp = 1 (got dp " << cfg.dp << ", tp " << cfg.tp << ", pp "
                                                                       << cfg.pp << ")");
  TrainInputs in = prepare_training(cfg);
  model_ = in.model;
  w_.source = std::make_unique<LocalGradientSource>(model_, in.data, in.layout, in.device);
  w_.layout = in.layout;
  init(in.resume_path);
}

Trainer::Trainer(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, TrainerWiring wiring,
                 const std::string& resume_from)
    : cfg_(cfg), model_(std::move(model)), w_(std::move(wiring)) {
  ST_CHECK(w_.source != nullptr, ValueError, "trainer: no gradient source");
  init(resume_from);
}

void Trainer::init(const std::string& resume_path) {
  StepReductions& r = w_.reductions;
  if (!r.loss) r.loss = std::make_shared<LocalReductions>();
  if (!r.grad) r.grad = std::make_shared<LocalReductions>();
  if (!r.flag) r.flag = r.grad;
  if (!w_.sync) w_.sync = std::make_shared<ClearGrads>(model_);
  if (!w_.state) w_.state = std::make_shared<ReplicatedState>(rank());
  scaler_ = LossScaler(cfg_.precision == Precision::fp16);
  nonfinite_ = NonFiniteGuard(cfg_.precision, cfg_.max_nonfinite_steps);
  schedule_ = LrSchedule{cfg_.lr_schedule, cfg_.lr, cfg_.warmup, cfg_.steps, cfg_.min_lr_ratio};
  ST_CHECK(cfg_.steps >= 0 && cfg_.clip >= 0, ValueError, "--steps and --clip must be ≥ 0");
  LoadedCheckpoint ckpt;
  if (!resume_path.empty()) {
    ckpt = load_train_checkpoint(resume_path);
    try {
      w_.state->load_model(*model_, ckpt.model);
    } catch (const ValueError& e) {
      ST_THROW(ValueError, resume_path << "/model.safetensors: " << e.what());
    }
    check_finite(model_->named_parameters(), "--resume: " + resume_path + "/model.safetensors");
  }
  const DType compute = compute_dtype(cfg_.precision);
  NamedTensors opt_params = model_->named_parameters();
  std::erase_if(opt_params, [&](const auto& np) { return w_.roles.updated_elsewhere.count(np.first) > 0; });
  opt_ = make_optimizer(cfg_, opt_params, compute);
  // parameters outside the optimizer's shard take the compute dtype too (no master for them)
  if (compute != DType::f32) model_->cast_parameters(compute);
  if (!resume_path.empty()) {
    const TrainState& st = ckpt.state;
    const std::string precision = to_string(cfg_.precision), optimizer = to_string(cfg_.optimizer);
    ST_CHECK(st.precision == precision && st.optimizer == optimizer, ValueError,
             "--resume: " << resume_path << " was written by a " << st.precision << "/" << st.optimizer
                          << " run, this one is " << precision << "/" << optimizer);
    ST_CHECK(st.global_batch == w_.source->global_batch() && st.seq_len == w_.source->seq_len(), ValueError,
             "--resume: " << resume_path << " has global batch " << st.global_batch << " × seq-len " << st.seq_len
                          << ", this run " << w_.source->global_batch() << " × " << w_.source->seq_len()
                          << " (the data order would change)");
    try {
      opt_->load_state_dict(w_.state->optimizer_part(ckpt.optimizer, opt_->params()));
    } catch (const ValueError& e) {
      ST_THROW(ValueError, resume_path << "/optimizer.safetensors: " << e.what());
    }
    check_finite(opt_->state_dict(), "--resume: " + resume_path + "/optimizer.safetensors");
    step_ = st.step;
    if (model_->generator()) model_->generator()->set_state(st.rng_seed, st.rng_offset);
    scaler_.set_state(st.loss_scale, st.loss_scale_good_steps);
    resumed_from_ = resume_path;
  }
  model_->train(true);
  model_->set_recompute(cfg_.recompute);
  if (!cfg_.val_data.empty() && cfg_.eval_every > 0) val_data_ = std::make_shared<TokenData>(cfg_.val_data);
}

std::vector<Tensor> Trainer::collect_grads() {
  NoGradGuard ng;
  std::vector<Tensor> grads;
  grads.reserve(opt_->size());
  for (auto& [name, p] : opt_->params()) {
    Tensor g = p.grad();  // as accumulated (f16/bf16 under mixed precision), still loss-scaled
    if (!g.defined()) g = Tensor::zeros(p.shape(), DType::f32, p.device());  // unused parameter: zero gradient
    grads.push_back(g);
  }
  return grads;
}

std::vector<double> Trainer::norm_weights() const {
  const std::set<std::string>& elsewhere = w_.roles.counted_elsewhere;
  if (elsewhere.empty()) return {};  // 1 for every parameter
  std::vector<double> w;
  w.reserve(opt_->size());
  for (auto& [name, p] : opt_->params()) w.push_back(elsewhere.count(name) ? 0.0 : 1.0);
  return w;
}

StepMetrics Trainer::train_step() {
  const auto t0 = Clock::now();
  StepMetrics m;
  m.step = step_ + 1;
  m.loss_scale = scaler_.scale();
  m.lr = schedule_.at(step_);
  w_.sync->begin_step();
  const double local_loss = w_.source->compute_gradients(step_, scaler_.scale(), *w_.sync);
  w_.sync->finish();
  std::vector<Tensor> grads = collect_grads();
  maybe_inject_overflow(grads, step_ + 1, rank());
  // One pass over every gradient in its own dtype and one host read: this rank's unscaled
  // weighted Σg² and inf/NaN flag. Unscaling and clipping happen inside the optimizer kernels.
  const double inv_scale = scaler_.enabled() ? 1.0 / scaler_.scale() : 1.0;
  const ops::GradStats stats = ops::grad_stats(grads, norm_weights(), inv_scale);
  // the inf/NaN verdict agreed by every rank (a rank's own gradients may be the only bad ones)
  const bool found_inf = w_.reductions.flag->allreduce_max(stats.found_inf ? 1.0 : 0.0) > 0.0;
  m.loss = w_.reductions.loss->allreduce_sum(local_loss);
  const bool nonfinite = found_inf || !std::isfinite(m.loss);
  if (nonfinite) {  // skipped (fp16: the scale halves); nonfinite_ stops a run that stays so
    const bool at_floor = scaler_.at_floor();
    scaler_.update(true);
    m.skipped = true;
    m.grad_norm = std::numeric_limits<double>::quiet_NaN();
    nonfinite_.nonfinite(m.step, m.loss, found_inf, at_floor);
  } else {
    m.grad_norm = std::sqrt(w_.reductions.grad->allreduce_sum(stats.sumsq));
    const ops::GradScale gs{inv_scale, clip_coefficient(m.grad_norm, cfg_.clip)};
    {
      trace::Scope ts("optimizer step", "optimizer");
      opt_->step(grads, m.lr, gs);
    }
    scaler_.update(false);
    nonfinite_.finite();
  }
  grads.clear();
  w_.sync->end_step(/*stepped=*/!nonfinite);
  ++step_;
  m.step_ms = ms_since(t0);
  const double tokens = static_cast<double>(w_.source->global_batch() * w_.source->seq_len());
  m.tokens_per_s = m.step_ms > 0 ? tokens / (m.step_ms / 1000.0) : 0.0;
  const bool on_gpu = model_->parameters().front().is_cuda();
  if (on_gpu) {
    // this rank's model FLOPs (forward ×3 for forward + backward; its replica's share of the
    // tokens) over an H100/H200's dense peak: 989 TFLOP/s f16/bf16, 67 TFLOP/s plain f32
    const double peak = cfg_.precision == Precision::fp32 ? 67e12 : 989e12;
    m.mfu = 3.0 * model_->flops_per_token(w_.source->seq_len()) * m.tokens_per_s /
            static_cast<double>(w_.layout.dp) / peak;
    m.mem_bytes = static_cast<int64_t>(cuda::device_bytes_peak());
  } else {
    m.mfu = 0.0;  // reported on the GPU only
    m.mem_bytes = static_cast<int64_t>(cpu_bytes_peak());
  }
  return m;
}

double Trainer::evaluate(const TokenData& val, int64_t max_batches) {
  const int64_t B = w_.layout.micro_batch, T = w_.source->seq_len();
  const int64_t n = std::min<int64_t>(max_batches, val.num_sequences(T) / B);
  ST_CHECK(n >= 1, ValueError, val.path() << " is too short for one validation batch of " << B << " × " << T);
  const Device device = model_->parameters().front().device();
  NoGradGuard ng;
  model_->eval();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    TokenBatch b = val.read(i * B, B, T);
    sum += model_->loss(model_->forward(b.inputs.to(device)), b.targets.to(device)).item();
  }
  model_->train(true);
  return sum / static_cast<double>(n);
}

TrainState Trainer::state() const {
  TrainState s;
  s.step = step_;
  s.global_batch = w_.source->global_batch();
  s.seq_len = w_.source->seq_len();
  if (model_->generator()) {
    s.rng_seed = model_->generator()->seed();
    s.rng_offset = model_->generator()->offset();
  }
  s.loss_scale = scaler_.scale();
  s.loss_scale_good_steps = scaler_.good_steps();
  s.precision = to_string(cfg_.precision);
  s.optimizer = to_string(cfg_.optimizer);
  const BatchLayout& l = w_.layout;
  s.layout = {{"dp", l.dp}, {"tp", cfg_.tp}, {"pp", cfg_.pp}, {"micro_batch", l.micro_batch}, {"grad_accum", l.grad_accum}};
  s.model = {{"family", model_->family()}, {"config", model_->config_json()}};
  return s;
}

std::string Trainer::save_checkpoint() {
  ST_CHECK(!cfg_.checkpoint_dir.empty(), ValueError, "save_checkpoint: no --checkpoint-dir");
  // every rank takes part (a collective for sharded layouts); rank 0 writes the union
  NamedTensors weights = w_.state->gather(opt_->master_weights(), "model");
  NamedTensors opt_state = w_.state->gather(opt_->state_dict(), "optimizer");
  if (rank() != 0) return "";
  return save_train_checkpoint(cfg_.checkpoint_dir, state(), model_->config_json(), weights, opt_state,
                               cfg_.keep_checkpoints);
}

void Trainer::run() {
  const bool lead = rank() == 0;
  // resumed: the steps after the checkpoint (written before a crash) go, then the run appends
  if (lead && !resumed_from_.empty() && !cfg_.metrics.empty()) cut_metrics_back(cfg_.metrics, step_);
  MetricsWriter metrics(lead ? cfg_.metrics : "", /*append=*/!resumed_from_.empty());
  if (!cfg_.trace.empty()) trace::start(rank());
  if (lead) {
    std::cout << "model " << model_->family() << ": " << model_->num_parameters() << " parameters, "
              << model_->layers().size() << " layers | " << to_string(cfg_.precision) << " | global batch "
              << w_.source->global_batch() << " × " << w_.source->seq_len() << " tokens | "
              << to_string(cfg_.optimizer) << " lr " << cfg_.lr << " (" << to_string(cfg_.lr_schedule) << ")\n";
    if (!resumed_from_.empty()) std::cout << "resumed from " << resumed_from_ << " at step " << step_ << "\n";
    std::cout.flush();
  }
  Progress bar(step_, cfg_.steps, lead && cfg_.progress);
  while (step_ < cfg_.steps) {
    StepMetrics m;
    {
      trace::Scope ts("step " + std::to_string(step_ + 1), "pipeline");
      m = train_step();
    }
    if (val_data_ && step_ % cfg_.eval_every == 0) m.val_loss = evaluate(*val_data_);
    // the step's line before its checkpoint: a crash in between leaves the line, which a resume
    // from the previous checkpoint cuts back
    if (lead) {
      metrics.write(m);
      if (cfg_.log_every > 0 && (m.step % cfg_.log_every == 0 || step_ == cfg_.steps)) bar.line(m.line(cfg_.steps));
      bar.update(step_);
    }
    const bool ckpt_due = !cfg_.checkpoint_dir.empty() &&
                          ((cfg_.checkpoint_every > 0 && step_ % cfg_.checkpoint_every == 0) || step_ == cfg_.steps);
    if (ckpt_due) {
      trace::Scope ts("checkpoint", "optimizer");
      save_checkpoint();
    }
  }
  bar.finish();
  if (!cfg_.trace.empty()) {
    trace::stop();
    std::function<void()> barrier = [this] {
      if (w_.world) w_.world->barrier()->wait();
    };
    trace::finish(cfg_.trace, rank(), w_.world ? w_.world->size() : 1, barrier);
  }
}

int run_training(const TrainConfig& cfg) {
  Trainer trainer(cfg);
  trainer.run();
  return 0;
}

}  // namespace st::runtime
