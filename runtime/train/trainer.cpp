// The training loop (see the header for the step order).
#include "runtime/train/trainer.h"

#include "runtime/train/fp8_delayed.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>

#include "comm/process_grid.h"
#include "ops/matmul.h"
#include "ops/optim.h"
#include "runtime/data/data_spec.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/optim/grad_clip.h"
#include "runtime/parallel/state_io.h"
#include "runtime/parallel/tp_shard.h"
#include "runtime/common/stop_request.h"
#include "runtime/common/timing.h"
#include "runtime/observe/memory_report.h"
#include "runtime/observe/device_capacity.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/trace.h"
#include "runtime/setup/batch_fix.h"
#include "runtime/setup/checkpoint_guard.h"
#include "runtime/plan/memory_check.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"
#include "runtime/train/nonfinite.h"
#include "runtime/train/resume_data.h"
#include "runtime/data/data_identity.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, NamedTensors params, DType compute) {
  switch (o.optimizer) {
    case OptimizerKind::adamw:
      return std::make_unique<AdamW>(std::move(params), AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay},
                                     compute);
    case OptimizerKind::sgd:
      return std::make_unique<Sgd>(std::move(params), SgdOptions{o.lr, o.momentum, o.weight_decay}, compute);
  }
  ST_THROW(ValueError, "optimizer " << static_cast<int>(o.optimizer) << " is not known");
}

// The step state's constants (runtime/train/train_step.h): AdamW's hyper-parameters as the state
// takes them (f32), the clip, and K · dp · cp.
StepConstants step_constants(const OptimizerOptions& o, const BatchLayout& layout) {
  StepConstants c;
  c.adam = {static_cast<float>(o.lr), static_cast<float>(o.beta1), static_cast<float>(o.beta2),
            static_cast<float>(o.eps), static_cast<float>(o.weight_decay)};
  c.clip = o.clip;
  c.divisor = static_cast<double>(layout.grad_accum * layout.dp * layout.cp);
  c.cp = layout.cp;
  return c;
}

// Elements of the whole model, each parameter once: this rank's parameters but those another
// rank counts (ParameterRoles::counted_elsewhere: tied copies on later stages, replicated
// tensors on tp ranks > 0), a padded tp shard (the vocabulary) at its unpadded share, and only
// on replica 0, cp rank 0 (the DP replicas and the cp ranks hold copies); summed over the world in i64 (exact).
int64_t whole_model_parameters(const LanguageModel& model, const ParameterRoles& roles, const BatchLayout& layout,
                               comm::Communicator* world) {
  int64_t mine = 0;
  if (layout.replica == 0 && layout.cp_rank == 0) {  // the cp ranks hold copies too
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

Trainer::Trainer(const TrainConfig& cfg, const TrainSeams& seams) : cfg_(cfg) {
  ST_CHECK(cfg.tp == 1 && cfg.pp == 1 && cfg.cp == 1 && (cfg.dp == 0 || cfg.dp == 1), ValueError,
           "the single-process trainer runs dp = tp = cp = pp = 1 (got dp " << cfg.dp << ", tp " << cfg.tp << ", cp "
                                                                            << cfg.cp << ", pp " << cfg.pp << ")");
  const ModelPlan plan = plan_model(cfg);
  if (!plan.resume_note.empty()) std::cout << plan.resume_note << std::endl;
  register_memory_cap(cfg, plan.entry, plan.seq_len, 1, 0);  // --max-memory
  TrainInputs in = prepare_training(cfg, plan);
  model_ = in.model;
  w_.source = std::make_unique<LocalGradientSource>(model_, in.data, in.layout, in.device);
  w_.layout = in.layout;
  w_.seams = seams;
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
  if (!w_.params) w_.params = std::make_shared<WholeParameters>();
  const PrecisionPolicy policy = precision_policy(cfg_);
  scaler_ = LossScaler(policy.loss_scaling);
  nonfinite_ = NonFiniteGuard(cfg_.precision, cfg_.max_nonfinite_steps);
  divergence_ = DivergenceGuard(cfg_.max_loss_ratio, cfg_.loss_ratio_steps, cfg_.max_zero_grad_steps);
  data_identity_ = data_identity(cfg_.data);  // ≤ 257 KiB read, once (every save records it)
  schedule_ = LrSchedule{cfg_.lr_schedule, cfg_.lr, cfg_.warmup, cfg_.steps, cfg_.min_lr_ratio};
  ST_CHECK(cfg_.steps >= 0 && cfg_.clip >= 0, ValueError, "--steps and --clip must be ≥ 0");
  // Where this rank's weights come from: the checkpoint (its part of each weight, read in place,
  // or a window of it), --init-from (the model was built from it; a ZeRO-3 rank reads its windows)
  // or the seed (built so; a ZeRO-3 rank draws its windows of the keyed init).
  OpenedCheckpoint ckpt;
  ParameterSource src;
  PartSource ckpt_parts;
  PretrainedSource pretrained;
  if (!resume_path.empty()) {
    ckpt = open_train_checkpoint(resume_path, cfg_.allow_unchecked);
    ckpt_parts = model_part_source(*model_, *ckpt.model);
    src.where = "--resume: " + resume_path + " (model weights)";
    src.whole = [&](LanguageModel& m) { load_parts(ckpt_parts, m.named_parameters(), /*strict=*/m.holds_all()); };
    src.window = [&](const std::string& name, const Shape& local, Tensor& piece, int64_t first) {
      piece.copy_(read_part_window(ckpt_parts, name, local, first, piece.numel()));
    };
    if (!w_.params->parameters_resident())  // headers of every weight checked before any piece is read
      check_parts(ckpt_parts, model_->named_parameters(), /*strict=*/model_->holds_all());
  } else if (!cfg_.init_from.empty() && !w_.params->parameters_resident()) {
    const ModelFactory& f = model_factory(model_->family());
    ST_CHECK(f.open_pretrained != nullptr, ValueError,
             "--init-from under --zero 3: the " << model_->family() << " model cannot be read in pieces");
    pretrained = f.open_pretrained(*model_, cfg_.init_from);
    src.where = "--init-from " + cfg_.init_from;
    src.window = [&](const std::string& name, const Shape& local, Tensor& piece, int64_t first) {
      piece.copy_(read_pretrained_window(pretrained, name, local, first, piece.numel()));
    };
  } else {
    src.window = [&](const std::string& name, const Shape&, Tensor& piece, int64_t first) {
      model_->init_parameter(name, piece, cfg_.seed, first);
    };
  }
  const DType compute = policy.compute;
  NamedTensors opt_params = model_->named_parameters();
  std::erase_if(opt_params, [&](const auto& np) { return w_.roles.updated_elsewhere.count(np.first) > 0; });
  opt_params = w_.params->start(*model_, std::move(opt_params), src, cfg_.device);  // whole, or this rank's pieces
  {
    MemoryCategoryScope mem(MemoryCategory::optim);
    opt_ = make_optimizer(cfg_, opt_params, compute);
    // an asynchronous save on the GPU downloads the optimizer's own copies of its state, written
    // by the due step's update (runtime/optim/optimizer.h), instead of copying the state first
    if (keeps_snapshot_block(cfg_) && !opt_params.empty() && opt_params.front().second.is_cuda())
      opt_->keep_snapshot();
  }
  w_.params->adopt(compute);  // ZeRO-3: shards and gather buffers in the compute dtype
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
                          << " (the data order would change)"
                          << keep_batch_hint(st.global_batch, st.seq_len, w_.layout.dp, w_.layout.micro_batch,
                                             w_.source->seq_len()));
    ST_CHECK(st.shuffle == cfg_.shuffle && (!st.shuffle || st.shuffle_seed == cfg_.seed), ValueError,
             "--resume: " << resume_path << " was written by a run with --shuffle " << st.shuffle
                          << (st.shuffle ? " --seed " + std::to_string(st.shuffle_seed) : std::string()) << ", this one has --shuffle "
                          << cfg_.shuffle << (cfg_.shuffle ? " --seed " + std::to_string(cfg_.seed) : std::string())
                          << " (the data order would change)");
    // the data it was trained on (issue 55: other data was taken without a word)
    const std::string data_note = check_resume_data(st, resume_path, cfg_.data, cfg_.data_changed);
    if (!data_note.empty() && rank() == 0) std::cout << data_note << std::endl;
    // the schedule keeps the length it started with: a longer --steps goes on at its end value
    if (st.schedule_steps > 0) schedule_.total_steps = st.schedule_steps;
    PartSource state = model_part_source(*model_, *ckpt.optimizer);
    if (state.rule) state.rule = optimizer_state_shard_rule(state.rule);
    w_.params->load_optimizer_state(*opt_, state);
    check_finite(opt_->state_dict(), "--resume: " + resume_path + " (optimizer state)");
    step_ = st.step;
    if (model_->generator()) model_->generator()->set_state(st.rng_seed, st.rng_offset);
    scaler_.set_state(st.loss_scale, st.loss_scale_good_steps);
    resumed_from_ = resume_path;
  }
  model_->train(true);
  model_->set_recompute(cfg_.recompute);
  // fp8 (the model was built with its GEMMs' scaling states: train_setup.h model_form), delayed:
  // the scales and amax histories of the checkpoint (a current-scaling one has none: they start
  // fresh, with a note)
  if (policy.fp8 && !resume_path.empty()) {
    const std::string note = load_fp8_checkpoint_state(model_->fp8_named_states(), *ckpt.optimizer, resume_path);
    if (!note.empty() && rank() == 0) std::cout << note << std::endl;
  }
  if (eval_interval(cfg_) > 0) val_data_ = open_token_source(cfg_.val_data);
  // --cuda-graph 1 (the default) where it applies: decided once, from the config and what the
  // wiring supports (TrainStep::capture_refusal; on CUDA a note says why not). The CPU has no
  // graphs; the rehearsal seam runs the graph mode's code there without the capture.
  const bool on_cuda = model_->parameters().front().device() == Device::cuda;
  if (cfg_.cuda_graph && (on_cuda || w_.seams.rehearse_graph)) {
    StepParts parts;
    parts.source = w_.source.get();
    parts.sync = w_.sync.get();
    parts.opt = opt_.get();
    parts.reductions = w_.reductions;
    parts.seams = w_.seams;
    const std::string why = TrainStep::capture_refusal(parts);
    if (why.empty())
      mode_ = on_cuda && !w_.seams.rehearse_graph ? StepMode::graph : StepMode::rehearsal;
    else if (rank() == 0)
      std::cout << "cuda graph: off (" << why << "); the step runs eagerly" << std::endl;
  }
}

std::vector<double> Trainer::norm_weights() const {
  const std::set<std::string>& elsewhere = w_.roles.counted_elsewhere;
  if (elsewhere.empty()) return {};  // 1 for every parameter
  std::vector<double> w;
  w.reserve(opt_->size());
  for (auto& [name, p] : opt_->params()) w.push_back(elsewhere.count(name) ? 0.0 : 1.0);
  return w;
}

StepMetrics Trainer::train_step() { return complete_step(launch_step()); }

Trainer::Pending Trainer::launch_step() {
  Pending p;
  p.t0 = Clock::now();
  StepMetrics& m = p.m;
  m.step = step_ + 1;
  m.lr = schedule_.at(step_);
  const Device device = model_->parameters().front().device();
  if (!runner_) {
    StepParts parts;
    parts.model = model_;
    parts.source = w_.source.get();
    parts.sync = w_.sync.get();
    parts.opt = opt_.get();
    parts.reductions = w_.reductions;
    parts.norm_weights = norm_weights();
    parts.seams = w_.seams;
    parts.rank = rank();
    parts.fp8_amax_group = w_.fp8_amax_group;
    runner_ = std::make_unique<TrainStep>(std::move(parts), step_constants(cfg_, w_.layout), scaler_,
                                          std::max(cfg_.steps, step_ + 1), mode_);
  }
  const bool replay = runner_->captured();
  if (!replay) reset_memory_peaks(device);
  const StepMode before = runner_->mode();
  // a due asynchronous save's step: its update also leaves the state in the optimizer's snapshot
  // block, which the previous save must have finished downloading
  const bool snapshot = opt_->snapshot_block().defined() && checkpoint_due(m.step);
  if (snapshot) {
    wait_for_save();
    snapshot_written_ = m.step;
  }
  runner_->launch(step_, m.lr, snapshot);
  if (runner_->mode() != before && rank() == 0)
    std::cout << "cuda graph: off (" << runner_->fallback() << "); the step runs eagerly" << std::endl;
  if (!replay) record_memory(step_memory_, device);  // the step allocated now (a replay allocates nothing)
  m.mem_params = step_memory_.mem_params;
  m.mem_grads = step_memory_.mem_grads;
  m.mem_optim = step_memory_.mem_optim;
  m.mem_act_peak = step_memory_.mem_act_peak;
  m.mem_peak = step_memory_.mem_peak;
  m.mem_bytes = step_memory_.mem_bytes;
  ++step_;
  return p;
}

StepMetrics Trainer::complete_step(const Pending& p) {
  StepMetrics m = p.m;
  const StepReport r = runner_->wait(m.step - 1);
  const auto done = Clock::now();
  runner_->write_back(scaler_, *opt_);
  m.loss = r.loss;
  m.loss_scale = r.loss_scale;
  m.skipped = r.skipped;
  m.grad_norm = r.skipped ? std::numeric_limits<double>::quiet_NaN() : r.grad_norm;
  if (r.stop_signal != 0) stop_ = r.stop_signal;  // the loop ends after this step (every rank alike)
  if (cfg_.precision == Precision::fp8) {  // this rank's; emit() sums them over the ranks
    m.fp8_overflow = r.fp8_overflow;
    m.fp8_underflow = r.fp8_underflow;
  }
  if (r.skipped) {  // skipped (fp16: the scale halved); a run that stays so stops here
    nonfinite_.nonfinite(m.step, m.loss, r.found_inf, r.at_floor);
  } else {
    nonfinite_.finite();
    divergence_.observe(m.step, m.loss, m.grad_norm);  // finite, but left its running mean?
  }
  // with the next step launched before this one was waited for, the time since the previous
  // completion is the step's share of the device's time; else since its own launch
  const auto from = last_done_ > p.t0 ? last_done_ : p.t0;
  last_done_ = done;
  return finish_metrics(m, from, model_->parameters().front().device(), done);
}

bool Trainer::sync_due(int64_t step) const {
  return step == cfg_.steps || (val_data_ && step % eval_interval(cfg_) == 0) ||
         (!cfg_.async_checkpoint && checkpoint_due(step));
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
  const DeviceCapacity cap = device_capacity(device, matrix_math(precision_policy(cfg_).compute, cfg_.tf32));
  m.mfu = cap.utilization(3.0 * model_->flops_per_token(w_.source->seq_len()) * m.tokens_per_s /
                          static_cast<double>(w_.layout.dp * w_.layout.cp));
  m.mem_total_bytes = cap.memory_bytes;
  return m;
}

void Trainer::reduce_step_metrics(StepMetrics& m) const {
  comm::Communicator& world = *w_.world;
  // (world + 2) i64: this rank's slot of mem_bytes, then its fp8 counts (the same collective sums
  // them, exactly: the step's count over every rank's casts)
  std::vector<int64_t> mine(static_cast<size_t>(world.size()) + 2, 0);
  mine[static_cast<size_t>(world.rank())] = m.mem_bytes;
  mine[static_cast<size_t>(world.size())] = m.fp8_overflow.value_or(0);
  mine[static_cast<size_t>(world.size()) + 1] = m.fp8_underflow.value_or(0);
  Tensor t = Tensor::from_vector(mine, {world.size() + 2});
  if (std::string(world.backend()) == "nccl") t = t.to(Device::cuda);  // NCCL takes device tensors
  world.all_reduce(t, comm::ReduceOp::sum)->wait();
  const Tensor all = t.to(Device::cpu);
  const int64_t* b = all.data<int64_t>();
  const int64_t top = static_cast<int64_t>(std::max_element(b, b + world.size()) - b);  // the lowest rank of a tie
  m.mem_max_bytes = b[top];
  m.mem_max_rank = static_cast<int>(top);
  m.ranks = world.size();
  if (m.fp8_overflow) m.fp8_overflow = b[world.size()];
  if (m.fp8_underflow) m.fp8_underflow = b[world.size() + 1];
}

double Trainer::evaluate(const TokenSource& val, int64_t max_batches) {
  const int64_t B = w_.layout.micro_batch, T = w_.source->seq_len();
  const int64_t n = std::min<int64_t>(max_batches, val.num_sequences(T) / B);
  ST_CHECK(n >= 1, ValueError, val.path() << " is too short for one validation batch of " << B << " × " << T);
  // the source splits the batches over the replicas (and a pipeline runs them through its
  // stages); each rank's share summed as training's loss is the mean over the n batches
  trace::Scope ts("evaluate", "pipeline");
  double mine;
  {
    const Fp8StateKeeper keep(model_->fp8_named_states());  // delayed FP8: evaluation records no amax
    mine = w_.source->evaluate(val, n);
  }
  return w_.reductions.loss->allreduce_sum(mine);
}

void Trainer::emit(const StepMetrics& step_metrics, MetricsWriter& metrics, Progress& bar) {
  StepMetrics m = step_metrics;
  const bool lead = rank() == 0;
  if (val_data_ && m.step % eval_interval(cfg_) == 0) {
    // --eval-tokens: ⌈tokens / (B·T)⌉ micro-batches (at least 1); 0: 8
    const int64_t per_batch = w_.layout.micro_batch * w_.source->seq_len();
    m.val_loss = evaluate(*val_data_, cfg_.eval_tokens > 0 ? (cfg_.eval_tokens + per_batch - 1) / per_batch : 8);
  }
  if (w_.world && w_.world->size() > 1) reduce_step_metrics(m);  // collective: the step line shows the largest rank; fp8 counts summed
  // the step's line before its checkpoint: a crash in between leaves the line, which a resume
  // from the previous checkpoint cuts back
  if (lead) {
    metrics.write(m);
    // every --log-every steps, the last, and any step whose validation loss was computed
    if (cfg_.log_every > 0 && (m.step % cfg_.log_every == 0 || m.step == cfg_.steps || m.val_loss))
      bar.line(m.line(cfg_.steps));
    bar.update(m.step);
  }
  const Clock::time_point b0 = Clock::now();
  checkpoint_boundary(m.step);
  // the stop's grace (runtime/common/stop_request.h): 3 of the longest step with its boundary work
  longest_step_ms_ = std::max(longest_step_ms_, m.step_ms + ms_between(b0, Clock::now()));
  set_stop_grace(10 + static_cast<int>(std::ceil(3 * longest_step_ms_ / 1000)));
  memory_.params = std::max(memory_.params, m.mem_params);
  memory_.grads = std::max(memory_.grads, m.mem_grads);
  memory_.optim = std::max(memory_.optim, m.mem_optim);
  memory_.act_peak = std::max(memory_.act_peak, m.mem_act_peak);
  memory_.peak = std::max(memory_.peak, m.mem_peak);
}

void Trainer::run() {
  const bool lead = rank() == 0;
  if (!resumed_from_.empty() && step_ >= cfg_.steps) {  // every rank alike: nothing runs, nothing is written
    if (lead)
      std::cout << "nothing to do: " << resumed_from_ << " is at step " << step_ << ", at or past --steps " << cfg_.steps
                << " (a larger --steps goes on from it)" << std::endl;
    return;
  }
  // resumed: the steps after the checkpoint (written before a crash) go, then the run appends
  if (lead && !resumed_from_.empty() && !cfg_.metrics.empty()) cut_metrics_back(cfg_.metrics, step_);
  MetricsWriter metrics(lead ? cfg_.metrics : "", /*append=*/!resumed_from_.empty());
  if (!cfg_.trace.empty()) {
    trace::start(rank());
    // the rank's place in the grid (comm/process_grid.h's rank order)
    const int r = rank();
    const comm::GridLayout grid = comm::GridLayout::make(w_.world ? w_.world->size() : 1, static_cast<int>(w_.layout.dp),
                                                         static_cast<int>(cfg_.tp), static_cast<int>(cfg_.pp),
                                                         static_cast<int>(w_.layout.cp));
    const comm::GridCoord c = grid.coord(r);
    trace::set_process_name("rank " + std::to_string(r) + " (dp " + std::to_string(c.dp) + ", tp " + std::to_string(c.tp) +
                            (grid.cp > 1 ? ", cp " + std::to_string(c.cp) : std::string()) + ", pp " +
                            std::to_string(c.pp) + ")");
  }
  const int64_t params = whole_model_parameters(*model_, w_.roles, w_.layout, w_.world.get());  // collective
  if (lead) {
    std::cout << "model " << model_->family() << ": " << params << " parameters, " << model_->depth()
              << " " << layer_noun(model_->family()) << " | " << to_string(cfg_.precision)
              << " | global batch " << w_.source->global_batch() << " × " << w_.source->seq_len() << " tokens | "
              << to_string(cfg_.optimizer) << " lr " << cfg_.lr << " (" << to_string(cfg_.lr_schedule);
    if (cfg_.lr_schedule == LrScheduleKind::cosine) std::cout << " over " << schedule_.total_steps << " steps";
    std::cout << ")\n";
    if (!resumed_from_.empty()) std::cout << "resumed from " << resumed_from_ << " at step " << step_ << "\n";
    else if (!cfg_.init_from.empty())  // what --init-from loaded, in one line
      std::cout << "initialised from " << cfg_.init_from << ": the weights of all " << params
                << " parameters (the optimizer state, step count and data order start fresh)\n";
    if (schedule_.warmup >= schedule_.total_steps)  // a --warmup as long as the run: say what the lr does
      std::cout << "lr schedule: --warmup " << schedule_.warmup << " covers all " << schedule_.total_steps
                << " steps, so the lr only rises, to " << schedule_.at(schedule_.total_steps - 1) << " at the last step"
                << (cfg_.lr_schedule == LrScheduleKind::cosine ? " (the cosine decay never starts)" : "")
                << ": a shorter --warmup or more --steps\n";
    if (cfg_.lr_schedule == LrScheduleKind::cosine && schedule_.total_steps < cfg_.steps)
      std::cout << "lr schedule: the checkpoint's cosine ends at step " << schedule_.total_steps << "; steps "
                << schedule_.total_steps + 1 << "-" << cfg_.steps << " run at its floor lr "
                << schedule_.at(schedule_.total_steps) << "\n";
    if (val_data_)
      std::cout << "validation: every " << eval_interval(cfg_) << " steps on " << cfg_.val_data << "\n";
    data_passes_note(/*at_start=*/true);  // a file shorter than a step: a warning with the epoch count
    std::cout.flush();
  }
  Progress bar(step_, cfg_.steps, lead && cfg_.progress);
  // In the graph mode a step's line is read after the next step is launched
  // (runtime/train/train_step.h), unless something after it needs the device's state of that step:
  // a checkpoint, validation, the end of the run. Eagerly each step is read at once.
  std::optional<Pending> previous;
  set_stop_armed(true);  // a signal from here on stops after a step (runtime/common/stop_request.h)
  while (step_ < cfg_.steps && stop_ == 0) {
    Pending p;
    {
      trace::Scope ts("step " + std::to_string(step_ + 1), "pipeline");
      p = launch_step();
    }
    if (previous) emit(complete_step(*previous), metrics, bar);
    previous.reset();
    if (snapshots_early() && checkpoint_due(p.m.step)) snapshot_early();
    if (!runner_->defers_reports() || sync_due(p.m.step))
      emit(complete_step(p), metrics, bar);
    else
      previous = p;
  }
  if (previous) emit(complete_step(*previous), metrics, bar);
  set_stop_armed(false);
  if (stop_ != 0 && step_ < cfg_.steps) finish_stop();  // collective: every rank agreed on stop_
  if (async_ && async_->in_flight()) {  // the run's last save commits before the run ends
    const Clock::time_point t0 = Clock::now();
    async_->poll(/*wait=*/true);
    end_wait_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  bar.finish();
  memory_.rss_peak = process_peak_rss();
  const std::vector<RankMemory> ranks = gather_rank_memory(memory_, w_.world.get());  // collective
  if (lead) std::cout << memory_table(ranks) << std::flush;
  if (lead) data_passes_note(/*at_start=*/false);  // the passes over --data, when more than one
  if (lead && saves_ > 0)  // what a save cost the training (launch/gpu/async_checkpoint_bench.sh reads it)
    std::cout << "checkpoints: " << saves_ << (cfg_.async_checkpoint ? " asynchronous" : " synchronous") << ", "
              << save_stall_ms_ / static_cast<double>(saves_) << " ms per save at the step boundary"
              << (snapshots_early() ? " (while the device ran the step)" : "") << " (the first "
              << save_first_ms_ << " ms" << (cfg_.async_checkpoint ? ", with the host memory's allocation" : "") << "; "
              << save_wait_ms_ << " ms in all waiting for a previous write)"
              << (cfg_.async_checkpoint ? ", " + std::to_string(end_wait_ms_) + " ms for the last write at the end" : "")
              << "\n" << std::flush;
  if (!cfg_.trace.empty()) {
    trace::stop();
    std::function<void()> barrier = [this] {
      if (w_.world) w_.world->barrier()->wait();
    };
    trace::finish(cfg_.trace, rank(), w_.world ? w_.world->size() : 1, barrier);
  }
}

int run_training(const TrainConfig& cfg, const TrainSeams& seams) {
  const std::string note = check_checkpoint_dir(cfg, nullptr);  // a fresh run leaves other runs' checkpoints alone
  if (!note.empty()) std::cout << note << std::endl;
  Trainer trainer(cfg, seams);
  trainer.run();
  return 0;
}

}  // namespace st::runtime
