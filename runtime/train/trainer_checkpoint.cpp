// Trainer's checkpoints: the train state, the synchronous save, and the asynchronous save's two
// ways through a step boundary (see the header's checkpoint_boundary and snapshot_early).
#include <chrono>

#include "runtime/observe/trace.h"
#include "runtime/train/fp8_delayed.h"
#include "runtime/train/trainer.h"

namespace st::runtime {

TrainState Trainer::state() const {
  TrainState s;
  s.step = step_;
  s.global_batch = w_.source->global_batch();
  s.seq_len = w_.source->seq_len();
  s.shuffle = cfg_.shuffle;
  s.shuffle_seed = cfg_.shuffle ? cfg_.seed : 0;
  s.data_identity = data_identity_;
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
  s.layout = {{"dp", l.dp},          {"tp", cfg_.tp},
              {"cp", l.cp},          {"pp", cfg_.pp},
              {"micro_batch", l.micro_batch}, {"grad_accum", l.grad_accum}};
  s.model = {{"family", model_->family()}, {"config", model_->config_json()}};
  return s;
}

Trainer::CheckpointTensors Trainer::checkpoint_tensors() {
  CheckpointTensors t;
  t.weights = w_.params->full_weights(opt_->master_weights());
  t.optimizer = w_.params->full_optimizer_state(opt_->state_dict());
  for (auto& kv : fp8_checkpoint_state(model_->fp8_named_states())) t.optimizer.push_back(std::move(kv));
  return t;
}

WrittenElsewhere Trainer::written_elsewhere() const {
  return [this](const std::string& key) {
    // the FP8 scaling states: equal over the stage's dp × tp ranks, written by its dp 0 / tp 0
    if (key.compare(0, 4, kFp8KeyPrefix) == 0) return !w_.writes_fp8_state;
    return w_.roles.counted_elsewhere.count(key) > 0;
  };
}

bool Trainer::checkpoint_due(int64_t step) const {
  return !cfg_.checkpoint_dir.empty() &&
         ((cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0) || step == cfg_.steps);
}

bool Trainer::snapshots_early() const { return cfg_.async_checkpoint && runner_ && runner_->defers_reports(); }

std::string Trainer::save_checkpoint() {
  ST_CHECK(!cfg_.checkpoint_dir.empty(), ValueError, "save_checkpoint: no --checkpoint-dir");
  // every rank writes its share (a collective for sharded layouts)
  const CheckpointTensors t = checkpoint_tensors();
  return save_train_checkpoint(cfg_.checkpoint_dir, state(), model_->config_json(), t.weights, t.optimizer,
                               model_->shard_rule(), written_elsewhere(), *w_.state, cfg_.keep_checkpoints,
                               w_.seams.crash_before_commit);
}

CheckpointSnapshot Trainer::take_snapshot() {
  if (!async_)
    async_ = std::make_unique<AsyncCheckpointer>(w_.world, cfg_.keep_checkpoints, w_.seams.crash_before_commit,
                                                 w_.seams.checkpoint_writer);
  wait_for_save();  // at most one in flight: a due save waits for the previous one
  trace::Scope tg("checkpoint gather", "optimizer");
  CheckpointTensors t = checkpoint_tensors();
  if (snapshot_written_ == step_) {
    // this step's update left the masters and the optimizer state in the optimizer's snapshot
    // block: those go from there, straight to the host; the rest (FP8 states, gathered tensors)
    // is copied first, as without
    for (NamedTensors* part : {&t.weights, &t.optimizer})
      for (auto& [name, x] : *part)
        if (Tensor c = opt_->snapshot_copy(x); c.defined()) x = c;
    async_->plans().download_directly(opt_->snapshot_block());
  } else {
    async_->plans().download_directly(Tensor());
  }
  return snapshot_train_checkpoint(cfg_.checkpoint_dir, state(), model_->config_json(), t.weights, t.optimizer,
                                   model_->shard_rule(), written_elsewhere(), *w_.state, async_->plans());
}

void Trainer::wait_for_save() {
  if (!async_ || !async_->in_flight()) return;
  const Clock::time_point w0 = Clock::now();
  trace::Scope tp("checkpoint poll", "optimizer");
  async_->poll(/*wait=*/true);
  save_wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
}

void Trainer::snapshot_early() {
  const Clock::time_point t0 = Clock::now();
  trace::Scope ts("checkpoint", "optimizer");
  early_ = take_snapshot();  // the device copies queue behind step step_, before the next step's launch
  early_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void Trainer::checkpoint_boundary(int64_t step) {
  const bool due = checkpoint_due(step);
  if (!due && !(async_ && async_->in_flight())) return;
  const Clock::time_point t0 = Clock::now();
  trace::Scope ts("checkpoint", "optimizer");
  double early_ms = 0;  // the snapshot's share of this save, when it was taken at the step's launch
  if (!cfg_.async_checkpoint) {
    save_checkpoint();
  } else if (early_) {
    ST_CHECK(due && early_->state.step == step, Error,
             "checkpoint: the snapshot taken at step " << early_->state.step << "'s launch reached step " << step
                                                       << "'s boundary");
    // Taken before this step's report was read: the host counters that the report sets are the
    // snapshot's now (fp16's loss scale; the optimizer's step count, which a skipped step does
    // not advance). Everything else in it was this step's when it was taken.
    CheckpointSnapshot snap = std::move(*early_);
    early_.reset();
    snap.state.loss_scale = scaler_.scale();
    snap.state.loss_scale_good_steps = scaler_.good_steps();
    rewrite_snapshot_entry(*snap.optimizer, "step",
                           Tensor::from_vector(std::vector<int64_t>{opt_->steps_taken()}, {1}));  // as Optimizer::state_dict
    {
      trace::Scope tw("checkpoint start", "optimizer");
      async_->start(std::move(snap));
    }
    early_ms = early_ms_;
  } else {
    if (async_ && !due) {
      trace::Scope tp("checkpoint poll", "optimizer");
      async_->poll(/*wait=*/false);  // a save in flight commits once every rank's writer finished
    }
    if (due) {
      CheckpointSnapshot snap = take_snapshot();  // makes async_ at the first save
      trace::Scope tw("checkpoint start", "optimizer");
      async_->start(std::move(snap));
    }
  }
  const double ms = early_ms + std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (due && ++saves_ == 1) save_first_ms_ = ms;
  save_stall_ms_ += ms;
}

}  // namespace st::runtime
