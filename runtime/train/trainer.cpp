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
#include "runtime/observe/device_capacity.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/trace.h"
#include "runtime/train/checkpoint_guard.h"
#include "runtime/train/model_registry.h"
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

// Test hook (documented in docs/testing.md): SHARDTRAIN_TEST_INF_STEP=s (from 1) and
// SHARDTRAIN_TEST_INF_RANK=r make rank r's first gradient infinite at step s, to check that every
// rank skips the step together and the loss scale halves.
void maybe_inject_overflow(std::vector<Tensor>& grads, int64_t step, int rank) {
  const char* at_step = std::getenv("SHARDTRAIN_TEST_INF_STEP");
  const char* at_rank = std::getenv("SHARDTRAIN_TEST_INF_RANK");
  if (!at_step || grads.empty() || std::atoll(at_step) != step) return;
  if (at_rank && std::atoi(at_rank) != rank) return;
  NoGradGuard ng;
  grads[0].flatten().narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
}

// Elements of the whole model, each parameter once: this rank's parameters but those another
// rank counts (ParameterRoles::counted_elsewhere: tied copies on later stages, replicated
// tensors on tp ranks > 0), a padded tp shard (the vocabulary) at its unpadded share, and only
// on replica 0 (the DP replicas hold copies); summed over the world in i64 (exact).
int64_t whole_model_parameters(const LanguageModel& model, const ParameterRoles& roles, const BatchLayout& layout,
                               comm::Communicator* world) {
  int64_t mine = 0;
  if (layout.replica == 0) {
    const ShardRule rule = model.shard_rule();
    const auto tp = model.tensor_parallel_group();
    const int64_t tp_size = tp ? tp->size() : 1, tp_rank = tp ? tp->rank() : 0;
    for (const auto& [name, p] : model.named_parameters()) {
      if (roles.counted_elsewhere.count(name)) continue;
      const ShardSpec spec = rule ? rule(name) : ShardSpec::replicate();
      if (spec.kind == ShardSpec::Kind::split && spec.pad_to_tp && tp_size > 1) {
        const int64_t dim = spec.dim < 0 ? spec.dim + p.dim() : spec.dim, per = p.numel() / p.size(dim);
        // rank t holds rows t·s … t·s + s − 1 of the padded dim; those below full_size count
        const int64_t s = p.size(dim), rows = std::clamp<int64_t>(spec.full_size - tp_rank * s, 0, s);
        mine += per * rows;
      } else {
        mine += p.numel();
      }
    }
  }
  if (!world || world->size() == 1) return mine;
  Tensor t = Tensor::from_vector(std::vector<int64_t>{mine}, {1});
  if (std::string(world->backend()) == "nccl") t = t.to(Device::cuda);  // NCCL takes device tensors
  world->all_reduce(t, comm::ReduceOp::sum)->wait();
  return t.to(Device::cpu).data<int64_t>()[0];
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
    in.model = build_model(cfg, init_gen, tp);
  }
  in.device = cfg.device;
  in.data = std::make_shared<TokenData>(cfg.data, SequenceOrder{cfg.shuffle, cfg.seed});
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
    ST_CHECK(st.shuffle == cfg_.shuffle && (!st.shuffle || st.shuffle_seed == cfg_.seed), ValueError,
             "--resume: " << resume_path << " was written by a run with --shuffle " << st.shuffle
                          << (st.shuffle ? " --seed " + std::to_string(st.shuffle_seed) : std::string()) << ", this one has --shuffle "
                          << cfg_.shuffle << (cfg_.shuffle ? " --seed " + std::to_string(cfg_.seed) : std::string())
                          << " (the data order would change)");
    // the schedule keeps the length it started with: a longer --steps goes on at its end value
    if (st.schedule_steps > 0) schedule_.total_steps = st.schedule_steps;
    try {
      opt_->load_state_dict(w_.state->optimizer_part(ckpt.optimizer, opt_->params()));
    } catch (const ValueError& e) {
      ST_THROW(ValueError, resume_path << "/optimizer.safetensors: " << e.what());
    }
    step_ = st.step;
    if (model_->generator()) model_->generator()->set_state(st.rng_seed, st.rng_offset);
    scaler_.set_state(st.loss_scale, st.loss_scale_good_steps);
    resumed_from_ = resume_path;
  }
  model_->train(true);
  model_->set_recompute(cfg_.recompute);
  if (eval_interval(cfg_) > 0) val_data_ = std::make_shared<TokenData>(cfg_.val_data);
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
  bool found_inf = false;
  if (scaler_.enabled()) found_inf = w_.reductions.flag->allreduce_max(stats.found_inf ? 1.0 : 0.0) > 0.0;
  m.loss = w_.reductions.loss->allreduce_sum(local_loss);
  if (found_inf) {
    m.skipped = scaler_.update(true);
    m.grad_norm = std::numeric_limits<double>::quiet_NaN();
  } else {
    m.grad_norm = std::sqrt(w_.reductions.grad->allreduce_sum(stats.sumsq));
    const ops::GradScale gs{inv_scale, clip_coefficient(m.grad_norm, cfg_.clip)};
    {
      trace::Scope ts("optimizer step", "optimizer");
      opt_->step(grads, m.lr, gs);
    }
    scaler_.update(false);
  }
  grads.clear();
  w_.sync->end_step(/*stepped=*/!found_inf);
  ++step_;
  m.step_ms = ms_since(t0);
  const double tokens = static_cast<double>(w_.source->global_batch() * w_.source->seq_len());
  m.tokens_per_s = m.step_ms > 0 ? tokens / (m.step_ms / 1000.0) : 0.0;
  // this rank's model FLOPs (forward ×3 for forward + backward; its replica's share of the
  // tokens) over its device's dense peak (runtime/observe/device_capacity.h); none on the CPU
  const Device device = model_->parameters().front().device();
  const DeviceCapacity cap = device_capacity(device, matrix_math(compute_dtype(cfg_.precision)));
  m.mfu = cap.utilization(3.0 * model_->flops_per_token(w_.source->seq_len()) * m.tokens_per_s /
                          static_cast<double>(w_.layout.dp));
  m.mem_bytes = static_cast<int64_t>(device == Device::cuda ? cuda::device_bytes_peak() : cpu_bytes_peak());
  m.mem_total_bytes = cap.memory_bytes;
  return m;
}

double Trainer::evaluate(const TokenData& val, int64_t max_batches) {
  const int64_t B = w_.layout.micro_batch, T = w_.source->seq_len();
  const int64_t n = std::min<int64_t>(max_batches, val.num_sequences(T) / B);
  ST_CHECK(n >= 1, ValueError, val.path() << " is too short for one validation batch of " << B << " × " << T);
  // the source splits the batches over the replicas (and a pipeline runs them through its
  // stages); each rank's share summed as training's loss is the mean over the n batches
  trace::Scope ts("evaluate", "pipeline");
  return w_.reductions.loss->allreduce_sum(w_.source->evaluate(val, n));
}

TrainState Trainer::state() const {
  TrainState s;
  s.step = step_;
  s.global_batch = w_.source->global_batch();
  s.seq_len = w_.source->seq_len();
  s.shuffle = cfg_.shuffle;
  s.shuffle_seed = cfg_.shuffle ? cfg_.seed : 0;
  s.schedule_steps = schedule_.total_steps;
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
  MetricsWriter metrics(lead ? cfg_.metrics : "", /*append=*/!resumed_from_.empty());
  if (!cfg_.trace.empty()) trace::start(rank());
  const int64_t params = whole_model_parameters(*model_, w_.roles, w_.layout, w_.world.get());  // collective
  if (lead) {
    const nlohmann::json mc = model_->config_json();
    const int64_t blocks = mc.value("n_layer", mc.value("layers", cfg_.layers));  // GPT's HF name, or ours
    std::cout << "model " << model_->family() << ": " << params << " parameters, " << blocks
              << (model_->family() == "mlp" ? " hidden layers" : " blocks") << " | " << to_string(cfg_.precision)
              << " | global batch " << w_.source->global_batch() << " × " << w_.source->seq_len() << " tokens | "
              << to_string(cfg_.optimizer) << " lr " << cfg_.lr << " (" << to_string(cfg_.lr_schedule);
    if (cfg_.lr_schedule == LrScheduleKind::cosine) std::cout << " over " << schedule_.total_steps << " steps";
    std::cout << ")\n";
    if (!resumed_from_.empty()) std::cout << "resumed from " << resumed_from_ << " at step " << step_ << "\n";
    if (cfg_.lr_schedule == LrScheduleKind::cosine && schedule_.total_steps < cfg_.steps)
      std::cout << "lr schedule: the checkpoint's cosine ends at step " << schedule_.total_steps << "; steps "
                << schedule_.total_steps + 1 << "-" << cfg_.steps << " run at its floor lr "
                << schedule_.at(schedule_.total_steps) << "\n";
    if (val_data_)
      std::cout << "validation: every " << eval_interval(cfg_) << " steps on " << cfg_.val_data << "\n";
    std::cout.flush();
  }
  Progress bar(step_, cfg_.steps, lead && cfg_.progress);
  while (step_ < cfg_.steps) {
    StepMetrics m;
    {
      trace::Scope ts("step " + std::to_string(step_ + 1), "pipeline");
      m = train_step();
    }
    if (val_data_ && step_ % eval_interval(cfg_) == 0) m.val_loss = evaluate(*val_data_);
    const bool ckpt_due = !cfg_.checkpoint_dir.empty() &&
                          ((cfg_.checkpoint_every > 0 && step_ % cfg_.checkpoint_every == 0) || step_ == cfg_.steps);
    if (ckpt_due) {
      trace::Scope ts("checkpoint", "optimizer");
      save_checkpoint();
    }
    if (lead) {
      metrics.write(m);
      if (cfg_.log_every > 0 && (m.step % cfg_.log_every == 0 || step_ == cfg_.steps)) bar.line(m.line(cfg_.steps));
      bar.update(step_);
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
  const std::string note = check_checkpoint_dir(cfg, nullptr);  // a fresh run leaves other runs' checkpoints alone
  if (!note.empty()) std::cout << note << std::endl;
  Trainer trainer(cfg);
  trainer.run();
  return 0;
}

}  // namespace st::runtime
