// The training loop (see the header for the step order).
#include "runtime/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>

#include "ops/matmul.h"
#include "ops/optim.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/optim/grad_clip.h"
#include "runtime/parallel/state_io.h"
#include "runtime/parallel/tp_shard.h"
#include "runtime/common/timing.h"
#include "runtime/observe/memory_report.h"
#include "runtime/observe/device_capacity.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/trace.h"
#include "runtime/train/checkpoint_guard.h"
#include "runtime/train/memory_check.h"
#include "runtime/train/memory_plan.h"
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

ModelPlan plan_model(const TrainConfig& cfg, int64_t tp, int64_t dp) {
  ModelPlan plan;
  if (cfg.resume) {
    ST_CHECK(!cfg.checkpoint_dir.empty(), ValueError, "--resume needs --checkpoint-dir");
    plan.resume_path = CheckpointDir(cfg.checkpoint_dir).latest();
  }
  if (!plan.resume_path.empty()) {
    TrainState st = TrainState::from_json(read_state(plan.resume_path), plan.resume_path + "/state.json");
    plan.entry = st.model;
    ST_CHECK(plan.entry.value("family", "") == cfg.model, ValueError,
             "--resume: the checkpoint " << plan.resume_path << " holds a " << plan.entry.value("family", "?")
                                         << " model, --model is " << cfg.model);
  } else {
    plan.entry = model_entry(cfg);
    check_fits_in_memory(cfg, plan.entry, tp, dp);  // before the model is described or a parameter allocated
  }
  const ModelDescription at_context = describe_model(plan.entry, 1);
  plan.seq_len = cfg.seq_len > 0 ? cfg.seq_len : at_context.context_length;
  ST_CHECK(plan.seq_len <= at_context.context_length, ValueError,
           "--seq-len " << plan.seq_len << " exceeds the model's context length " << at_context.context_length);
  plan.description = describe_model(plan.entry, plan.seq_len);
  return plan;
}

TrainInputs prepare_training(const TrainConfig& cfg, const ModelPlan& plan, std::vector<LayerRange> layers, int64_t dp,
                             int64_t replica, std::shared_ptr<comm::Communicator> tp, bool sharded_start) {
  ST_CHECK(!cfg.data.empty(), ValueError, "train: no token file (--data)");
  TrainInputs in;
  in.resume_path = plan.resume_path;
  in.device = cfg.device;
  in.data = std::make_shared<TokenData>(cfg.data, SequenceOrder{cfg.shuffle, cfg.seed});
  const int64_t max_tok = in.data->max_token();
  ST_CHECK(max_tok < plan.description.vocab_size, ValueError,
           cfg.data << " holds token id " << max_tok << ", outside the model's vocabulary of "
                    << plan.description.vocab_size);
  if (sharded_start) {  // ZeRO-3: no parameter's bytes; the Trainer fills this rank's pieces (Zero3::shard)
    Storage::DeferAllocation defer;
    in.model = build_model_from_json(plan.entry, ModelBuild{layers, tp, dropout_seed(cfg.seed)});
  } else if (!in.resume_path.empty()) {  // the Trainer fills it from the checkpoint
    in.model = build_model_from_json(plan.entry, ModelBuild{layers, tp, dropout_seed(cfg.seed)});
    MemoryCategoryScope mem(MemoryCategory::params);
    in.model->move_parameters(in.device);
  } else {
    in.model = build_model(cfg, layers, tp, in.device);
    if (!cfg.init_from.empty()) check_finite(in.model->named_parameters(), "--init-from " + cfg.init_from);
  }
  in.layout.micro_batch = cfg.micro_batch;
  in.layout.grad_accum = cfg.grad_accum;
  in.layout.dp = dp;
  in.layout.replica = replica;
  in.layout.seq_len = plan.seq_len;
  return in;
}

Trainer::Trainer(const TrainConfig& cfg) : cfg_(cfg) {
  ST_CHECK(cfg.tp == 1 && cfg.pp == 1 && (cfg.dp == 0 || cfg.dp == 1), ValueError,
           "the single-process trainer runs dp = tp = pp = 1 (got dp " << cfg.dp << ", tp " << cfg.tp << ", pp "
                                                                       << cfg.pp << ")");
  const ModelPlan plan = plan_model(cfg);
  register_memory_cap(cfg, plan.entry, plan.seq_len, 1, 0);  // --max-memory
  TrainInputs in = prepare_training(cfg, plan);
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
  ops::cuda::set_gemm_allow_tf32(cfg_.tf32);  // process-wide; a CPU-only build ignores it
  StepReductions& r = w_.reductions;
  if (!r.loss) r.loss = std::make_shared<LocalReductions>();
  if (!r.grad) r.grad = std::make_shared<LocalReductions>();
  if (!r.flag) r.flag = r.grad;
  if (!w_.sync) w_.sync = std::make_shared<ClearGrads>(model_);
  if (!w_.state) w_.state = std::make_shared<StateSharding>();
  scaler_ = LossScaler(cfg_.precision == Precision::fp16);
  nonfinite_ = NonFiniteGuard(cfg_.precision, cfg_.max_nonfinite_steps);
  schedule_ = LrSchedule{cfg_.lr_schedule, cfg_.lr, cfg_.warmup, cfg_.steps, cfg_.min_lr_ratio};
  ST_CHECK(cfg_.steps >= 0 && cfg_.clip >= 0, ValueError, "--steps and --clip must be ≥ 0");
  OpenedCheckpoint ckpt;
  if (!resume_path.empty()) {  // this rank's part of each weight, read in place
    ckpt = open_train_checkpoint(resume_path);
    if (!w_.zero3) {  // (ZeRO-3 reads its pieces only, below)
      load_parts(model_part_source(*model_, *ckpt.model), model_->named_parameters(),
                 /*strict=*/model_->holds_all());
      check_finite(model_->named_parameters(), "--resume: " + resume_path + " (model weights)");
    }
  }
  const DType compute = compute_dtype(cfg_.precision);
  NamedTensors opt_params = model_->named_parameters();
  std::erase_if(opt_params, [&](const auto& np) { return w_.roles.updated_elsewhere.count(np.first) > 0; });
  if (w_.zero3) opt_params = shard_zero3(resume_path, ckpt);  // this rank's pieces, nothing else
  {
    MemoryCategoryScope mem(MemoryCategory::optim);
    opt_ = make_optimizer(cfg_, opt_params, compute);
  }
  if (w_.zero3) w_.zero3->adopt(compute);  // shards and gather buffers in the compute dtype
  {
    MemoryCategoryScope mem(MemoryCategory::params);
    // parameters outside the optimizer's shard take the compute dtype too (no master for them)
    if (compute != DType::f32) model_->cast_parameters(compute);
    // the model's tensors count as parameters even when the optimizer made their low-precision copy
    for (const Tensor& p : model_->parameters()) p.storage()->set_category(MemoryCategory::params);
  }
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
    PartSource state = model_part_source(*model_, *ckpt.optimizer);
    if (state.rule) state.rule = optimizer_state_shard_rule(state.rule);
    if (w_.zero3) {  // of each key only this rank's piece is read
      opt_->load_state([&](const std::string& key, const Tensor& dst) {
        if (key == "step") return void(Tensor(dst).copy_(read_part(state, key, dst.shape())));
        const std::string name = key.substr(key.find('.') + 1);
        const Zero3::PieceRange r = w_.zero3->piece_range(name);
        Tensor(dst).copy_(read_part_window(state, key, w_.zero3->local_shape(name), r.first, r.len).view(dst.shape()));
      });
    } else {
      check_parts(state, opt_->state_dict(), /*strict=*/false);  // this rank's keys (its stage, shards, ZeRO run)
      opt_->load_state([&](const std::string& key, const Tensor& dst) { Tensor(dst).copy_(read_part(state, key, dst.shape())); });
    }
    check_finite(opt_->state_dict(), "--resume: " + resume_path + " (optimizer state)");
    step_ = st.step;
    if (model_->generator()) model_->generator()->set_state(st.rng_seed, st.rng_offset);
    scaler_.set_state(st.loss_scale, st.loss_scale_good_steps);
    resumed_from_ = resume_path;
  }
  model_->train(true);
  model_->set_recompute(cfg_.recompute);
  // the chunked head's loss reads wte outside the head's forward, where ZeRO-3 has released it
  model_->set_chunked_head(cfg_.chunked_head && !w_.zero3);
  if (eval_interval(cfg_) > 0) val_data_ = std::make_shared<TokenData>(cfg_.val_data);
  // --cuda-graph 1 (the default) where it applies: CUDA, one process, AdamW (a note says why not);
  // the CPU has no graphs and runs eagerly without a note, unless the test hook runs the graph
  // step's code eagerly there (runtime/train/cuda_graph_step.h)
  if (cfg_.cuda_graph &&
      (model_->parameters().front().device() == Device::cuda || std::getenv("SHARDTRAIN_TEST_GRAPH_STEP_EAGER"))) {
    const bool one_process = (!w_.world || w_.world->size() == 1) && w_.roles.counted_elsewhere.empty() &&
                             w_.roles.updated_elsewhere.empty() && dynamic_cast<ClearGrads*>(w_.sync.get());
    const std::string why = CudaGraphStep::refusal(cfg_, one_process, w_.source.get());
    use_graph_ = why.empty();  // built at the first step, from the scaler and optimizer as they are then
    if (!use_graph_ && rank() == 0) std::cout << "cuda graph: off (" << why << "); the step runs eagerly" << std::endl;
  }
}

NamedTensors Trainer::shard_zero3(const std::string& resume_path, const OpenedCheckpoint& ckpt) {
  // each piece from the checkpoint, the pretrained directory or the keyed init: only its elements
  // are read or drawn (runtime/parallel/zero3.h, "Start")
  Zero3::PieceFill fill;
  PartSource src;
  PretrainedSource pretrained;
  std::string where;
  if (!resume_path.empty()) {
    src = model_part_source(*model_, *ckpt.model);
    check_parts(src, model_->named_parameters(), /*strict=*/model_->holds_all());  // headers, before any read
    fill = [&](const std::string& name, Tensor& piece, int64_t first) {
      piece.copy_(read_part_window(src, name, w_.zero3->local_shape(name), first, piece.numel()));
    };
    where = "--resume: " + resume_path + " (model weights)";
  } else if (!cfg_.init_from.empty()) {
    const ModelFactory& f = model_factory(model_->family());
    ST_CHECK(f.open_pretrained != nullptr, ValueError,
             "--init-from under --zero 3: the " << model_->family() << " model cannot be read in pieces");
    pretrained = f.open_pretrained(*model_, cfg_.init_from);
    fill = [&](const std::string& name, Tensor& piece, int64_t first) {
      piece.copy_(read_pretrained_window(pretrained, name, w_.zero3->local_shape(name), first, piece.numel()));
    };
    where = "--init-from " + cfg_.init_from;
  } else {
    fill = [&](const std::string& name, Tensor& piece, int64_t first) {
      model_->init_parameter(name, piece, cfg_.seed, first);
    };
  }
  NamedTensors pieces = w_.zero3->shard(fill, cfg_.device);
  if (!where.empty()) check_finite(pieces, where);
  return pieces;
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
  if (use_graph_) return complete_graph_step(launch_graph_step());
  const auto t0 = Clock::now();
  StepMetrics m;
  m.step = step_ + 1;
  m.loss_scale = scaler_.scale();
  m.lr = schedule_.at(step_);
  const Device device = model_->parameters().front().device();
  reset_memory_peaks(device);
  eager_step(m);
  ++step_;
  record_memory(m, device);
  return finish_metrics(m, t0, device);
}

void Trainer::eager_step(StepMetrics& m) {
  double local_loss = 0;
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    w_.sync->begin_step();
  }
  {
    MemoryCategoryScope mem(MemoryCategory::activations);  // parameters' .grad() are counted as grads (autograd)
    local_loss = w_.source->compute_gradients(step_, scaler_.scale(), *w_.sync);
  }
  {
    MemoryCategoryScope mem(MemoryCategory::grads);
    w_.sync->finish();
  }
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
      MemoryCategoryScope mem(MemoryCategory::optim);
      opt_->step(grads, m.lr, gs);
    }
    scaler_.update(false);
    nonfinite_.finite();
  }
  grads.clear();
  w_.sync->end_step(/*stepped=*/!nonfinite);
}

void Trainer::record_memory(StepMetrics& m, Device device) const {
  const MemoryUsage mem = memory_usage(device);
  m.mem_params = static_cast<int64_t>(mem.peak_of(MemoryCategory::params));
  m.mem_grads = static_cast<int64_t>(mem.peak_of(MemoryCategory::grads));
  m.mem_optim = static_cast<int64_t>(mem.peak_of(MemoryCategory::optim));
  m.mem_act_peak = static_cast<int64_t>(mem.peak_of(MemoryCategory::activations));
  m.mem_peak = static_cast<int64_t>(mem.total_peak);
  m.mem_bytes = static_cast<int64_t>(device == Device::cuda ? cuda::device_bytes_peak() : cpu_bytes_peak());
}

StepMetrics Trainer::finish_metrics(StepMetrics m, Clock::time_point t0, Device device, Clock::time_point t1) {
  m.step_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double tokens = static_cast<double>(w_.source->global_batch() * w_.source->seq_len());
  m.tokens_per_s = m.step_ms > 0 ? tokens / (m.step_ms / 1000.0) : 0.0;
  // this rank's model FLOPs (forward ×3 for forward + backward; its replica's share of the
  // tokens) over its device's dense peak (runtime/observe/device_capacity.h); none on the CPU
  const DeviceCapacity cap = device_capacity(device, matrix_math(compute_dtype(cfg_.precision), cfg_.tf32));
  m.mfu = cap.utilization(3.0 * model_->flops_per_token(w_.source->seq_len()) * m.tokens_per_s /
                          static_cast<double>(w_.layout.dp));
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
  // every rank writes its share (a collective for sharded layouts); a copy another rank also
  // holds (a tied weight's later stage, a tp-replicated tensor on tp rank > 0) is written there
  const std::set<std::string>& elsewhere = w_.roles.counted_elsewhere;
  NamedTensors weights = opt_->master_weights(), opt_state = opt_->state_dict();
  if (w_.zero3) {  // ZeRO-3: every tensor assembled from its pieces, kept by the rank holding its start
    weights = w_.zero3->gather_full(weights);
    NamedTensors full{opt_state.front()};  // "step"
    std::vector<std::string> slots;        // "exp_avg", "exp_avg_sq", "master": the same on every rank
    for (const auto& [key, t] : opt_state)
      if (key != "step" && std::find(slots.begin(), slots.end(), key.substr(0, key.find('.'))) == slots.end())
        slots.push_back(key.substr(0, key.find('.')));
    for (const std::string& slot : slots) {
      NamedTensors pieces;
      for (const auto& [key, t] : opt_state)
        if (key.compare(0, slot.size() + 1, slot + ".") == 0) pieces.emplace_back(key.substr(slot.size() + 1), t);
      for (auto& [name, t] : w_.zero3->gather_full(pieces)) full.emplace_back(slot + "." + name, t);
    }
    opt_state = std::move(full);
  }
  return save_train_checkpoint(cfg_.checkpoint_dir, state(), model_->config_json(), weights,
                               opt_state, model_->shard_rule(),
                               [&](const std::string& name) { return elsewhere.count(name) > 0; }, *w_.state,
                               cfg_.keep_checkpoints);
}

void Trainer::emit(const StepMetrics& step_metrics, MetricsWriter& metrics, Progress& bar) {
  StepMetrics m = step_metrics;
  const bool lead = rank() == 0;
  if (val_data_ && m.step % eval_interval(cfg_) == 0) m.val_loss = evaluate(*val_data_);
  // the step's line before its checkpoint: a crash in between leaves the line, which a resume
  // from the previous checkpoint cuts back
  if (lead) {
    metrics.write(m);
    if (cfg_.log_every > 0 && (m.step % cfg_.log_every == 0 || m.step == cfg_.steps)) bar.line(m.line(cfg_.steps));
    bar.update(m.step);
  }
  const bool ckpt_due = !cfg_.checkpoint_dir.empty() &&
                        ((cfg_.checkpoint_every > 0 && m.step % cfg_.checkpoint_every == 0) || m.step == cfg_.steps);
  if (ckpt_due) {
    trace::Scope ts("checkpoint", "optimizer");
    save_checkpoint();
  }
  memory_.params = std::max(memory_.params, m.mem_params);
  memory_.grads = std::max(memory_.grads, m.mem_grads);
  memory_.optim = std::max(memory_.optim, m.mem_optim);
  memory_.act_peak = std::max(memory_.act_peak, m.mem_act_peak);
  memory_.peak = std::max(memory_.peak, m.mem_peak);
}

void Trainer::run() {
  const bool lead = rank() == 0;
  // resumed: the steps after the checkpoint (written before a crash) go, then the run appends
  if (lead && !resumed_from_.empty() && !cfg_.metrics.empty()) cut_metrics_back(cfg_.metrics, step_);
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
  if (use_graph_) {
    // a graph step's line is read after the next step is launched (runtime/train/cuda_graph_step.h),
    // unless something after it needs the device's state of that step: a checkpoint, validation,
    // the end of the run
    std::optional<GraphPending> previous;
    while (use_graph_ && step_ < cfg_.steps) {  // (a warm-up that cannot be captured turns it off)
      GraphPending p;
      {
        trace::Scope ts("step " + std::to_string(step_ + 1), "pipeline");
        p = launch_graph_step();
      }
      if (previous) emit(complete_graph_step(*previous), metrics, bar);
      previous.reset();
      if (p.eager || sync_due(p.m.step))
        emit(complete_graph_step(p), metrics, bar);
      else
        previous = p;
    }
    if (previous) emit(complete_graph_step(*previous), metrics, bar);
  }
  while (step_ < cfg_.steps) {
    StepMetrics m;
    {
      trace::Scope ts("step " + std::to_string(step_ + 1), "pipeline");
      m = train_step();
    }
    emit(m, metrics, bar);
  }
  bar.finish();
  memory_.rss_peak = process_peak_rss();
  const std::vector<RankMemory> ranks = gather_rank_memory(memory_, w_.world.get());  // collective
  if (lead) std::cout << memory_table(ranks) << std::flush;
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
