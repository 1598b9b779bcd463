// The training loop: the run's steps (runtime/train/train_step.h: one body for every layout, eager
// or captured as a CUDA graph), their metrics, validation and checkpoints. What a layout changes is
// passed in as TrainerWiring (below), built before the Trainer (runtime/train/parallel_training.cpp
// builds one per axis); the step's order is train_step.h's.
// With --cuda-graph 1 (one process on CUDA) each step's line is read after the next step was
// launched, unless the host must see the step first (a synchronous checkpoint, validation, the end
// of the run). An asynchronous checkpoint does not stop that: its snapshot is taken right after
// its step's launch, queued behind it on the device, so the host's part of the save runs while
// the device runs the step (snapshot_early below).
// A stop request (SIGINT / SIGTERM: runtime/common/stop_request.h), agreed by every rank in the
// step's flag reduction, ends the loop after that step: a checkpoint is saved there (with a
// --checkpoint-dir and --save-on-signal 1, unless one was due there anyway) and the stop recorded
// for launch/'s closing line (finish_stop).
// Checkpoints (runtime/train/train_checkpoint.h) every cfg.checkpoint_every steps and at the end;
// --resume takes the newest complete one and continues bit-exactly (same data order, same
// dropout stream, same optimizer and scaler state).
#pragma once
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "runtime/common/timing.h"
#include "runtime/nn/language_model.h"
#include "runtime/observe/memory_report.h"
#include "runtime/observe/metrics.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/parallel/reductions.h"
#include "runtime/parallel/state_sharding.h"
#include "runtime/parallel/parameter_sharding.h"
#include "runtime/setup/train_config.h"
#include "runtime/train/async_checkpoint.h"
#include "runtime/train/gradient_source.h"
#include "runtime/train/divergence.h"
#include "runtime/train/nonfinite.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/train_setup.h"
#include "runtime/train/train_step.h"

namespace st::runtime {

class Progress;

// What a layout plugs into the step and the run, built before the Trainer; every member has a
// one-process default.
struct ParameterRoles {
  // ZeRO: parameters whose update another DP rank's optimizer owns (this rank keeps no state).
  std::set<std::string> updated_elsewhere;
  // The global gradient norm counts every parameter once: a copy another rank of the replica
  // also counts (a tied weight on a later stage, a replicated tensor on tp rank > 0) weighs 0.
  std::set<std::string> counted_elsewhere;
};
struct TrainerWiring {
  std::unique_ptr<GradientSource> source;       // required
  std::shared_ptr<GradientSync> sync;           // null: ClearGrads over the model
  std::shared_ptr<StateSharding> state;         // who writes which checkpoint part; null: this rank, all of it
  StepReductions reductions;
  ParameterRoles roles;
  std::shared_ptr<ParameterSharding> params;   // how this rank holds the parameters (ZeRO-3: pieces); null: whole
  std::shared_ptr<comm::Communicator> world;    // every rank of the job; null: one process
  BatchLayout layout;                           // recorded in checkpoints
  TrainSeams seams;                              // test seams of the step (none in a real run)
  // --fp8-scaling delayed (runtime/train/fp8_delayed.h): the ranks this rank's FP8 amaxes are
  // max-reduced over (its pipeline stage's dp × tp ranks; null: one process), and whether this
  // rank writes its stage's FP8 scaling states into checkpoints (dp 0 and tp 0 of the stage)
  std::shared_ptr<comm::Communicator> fp8_amax_group;
  bool writes_fp8_state = true;
};

class Trainer {
 public:
  // One process: builds the model (cfg.model / cfg.init_from, or the newest checkpoint under
  // cfg.checkpoint_dir with cfg.resume), the data (cfg.data, required) and the parts.
  explicit Trainer(const TrainConfig& cfg, const TrainSeams& seams = {});
  // With a model built by the caller in f32 (parameters on cfg.device) and the layout's parts
  // wired to it. `resume_from`: a checkpoint directory to restore, "" for none.
  Trainer(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, TrainerWiring wiring,
          const std::string& resume_from = "");

  StepMetrics train_step();           // runs step number step() (from 0) and returns its metrics
  // Steps until cfg.steps, logging and checkpointing; at the end rank 0 prints every rank's
  // memory (runtime/observe/memory_report.h; one collective over the world).
  void run();
  std::string save_checkpoint();      // under cfg.checkpoint_dir (collective); the directory on rank 0
  double evaluate(const TokenSource& val, int64_t max_batches = 8);  // mean loss, no gradients

  int64_t step() const { return step_; }
  LanguageModel& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  LossScaler& scaler() { return scaler_; }
  const TrainConfig& config() const { return cfg_; }
  const std::string& resumed_from() const { return resumed_from_; }
  // steps run in the graph mode (--cuda-graph 1 where it applies; a warm-up's fallback turns it off)
  bool cuda_graph() const { return runner_ ? runner_->mode() != StepMode::eager : mode_ != StepMode::eager; }
  TrainState state() const;

 private:
  void init(const std::string& resume_path);
  // What a checkpoint writes, as whole as this rank writes it (collective: ZeRO-3 assembles the
  // pieces, runtime/parallel/parameter_sharding.h): the weights, then the optimizer state plus
  // --fp8-scaling delayed's scaling states (runtime/train/fp8_delayed.h)
  struct CheckpointTensors {
    NamedTensors weights, optimizer;
  };
  CheckpointTensors checkpoint_tensors();
  // a checkpoint key another rank writes: a parameter counted elsewhere (a tied weight's later
  // stage, a tp-replicated tensor on tp rank > 0), or an FP8 state this rank does not write
  WrittenElsewhere written_elsewhere() const;
  std::vector<double> norm_weights() const;
  // A launched step (its metrics' step, lr and memory filled) whose report is not read yet.
  struct Pending {
    StepMetrics m;
    Clock::time_point t0;  // when it was launched
  };
  Pending launch_step();                        // advances step()
  StepMetrics complete_step(const Pending& p);  // waits for its report
  // after `step` (from 1): a synchronous checkpoint, validation or the end
  bool sync_due(int64_t step) const;
  void emit(const StepMetrics& m, MetricsWriter& metrics, Progress& bar);  // run()'s per-step work
  bool checkpoint_due(int64_t step) const;  // a checkpoint is written after `step` (from 1)
  // run()'s checkpoint work at `step`'s boundary, after its line (collective): with
  // --async-checkpoint 1 the save in flight commits once every rank's writer finished (waited for
  // when a save is due), then a due save starts in the background — from the snapshot taken at
  // the step's launch when there is one; else a due save is written here. Times the training
  // thread's part (with the early snapshot's).
  void checkpoint_boundary(int64_t step);
  // The asynchronous save's snapshot in the graph mode, whose reports are read a step late: taken
  // right after the due step's launch (the device copies queue behind it; the host's part runs
  // while the device runs the step), so the next step is launched before this one is read, as at
  // any other step. checkpoint_boundary() completes it once the step's report is read.
  bool snapshots_early() const;
  void snapshot_early();
  // waits for the save in flight (collective), then this rank's share of the state in host
  // memory (CUDA: its device copies queued on the current stream); makes async_ at the first save
  CheckpointSnapshot take_snapshot();
  void wait_for_save();  // the asynchronous save in flight, if any, finished (collective)
  // after the loop ended on a stop request at step_ < cfg.steps (collective): the signal's save
  // (--save-on-signal), then the record (runtime/common/stop_request.h)
  void finish_stop();
  // rank 0: at the start, a warning when one step reads more sequences than --data holds (each
  // step repeats some; the epochs --steps makes); at the end, the passes over --data when more than
  // one (runtime/train/trainer_stop.cpp)
  void data_passes_note(bool at_start) const;
  void record_memory(StepMetrics& m, Device device) const;   // the mem_* fields from the allocators
  // Collective (several ranks), one all-reduce: the largest rank's mem_bytes and that rank, for
  // the step line, and the fp8 counts summed over the ranks (set only under fp8).
  void reduce_step_metrics(StepMetrics& m) const;
  // step time (t0 → t1), throughput, MFU
  StepMetrics finish_metrics(StepMetrics m, Clock::time_point t0, Device device, Clock::time_point t1 = Clock::now());
  int rank() const { return w_.world ? w_.world->rank() : 0; }

  TrainConfig cfg_;
  std::shared_ptr<LanguageModel> model_;
  TrainerWiring w_;
  std::unique_ptr<Optimizer> opt_;
  LossScaler scaler_{false};
  NonFiniteGuard nonfinite_{Precision::fp32, 1};  // stops a run that stays inf/NaN (runtime/train/nonfinite.h)
  DivergenceGuard divergence_;                    // stops a run whose loss left its mean (runtime/train/divergence.h)
  LrSchedule schedule_;
  int64_t step_ = 0;
  std::string resumed_from_;
  std::string data_identity_;  // of cfg_.data (runtime/data/data_identity.h), read once: every save records it
  std::shared_ptr<const TokenSource> val_data_;
  RankMemory memory_;  // this rank's bytes, for the table at the end of run()
  StepMode mode_ = StepMode::eager;      // decided in init() (runtime/train/train_step.h)
  std::unique_ptr<TrainStep> runner_;    // made at the first step, from the scaler and optimizer as they are then
  StepMetrics step_memory_;              // mem_* of the last step that allocated (replays allocate nothing)
  Clock::time_point last_done_{};        // when the host saw the last step complete
  std::unique_ptr<AsyncCheckpointer> async_;  // --async-checkpoint 1: made at the first save
  std::optional<CheckpointSnapshot> early_;   // taken at a due step's launch (snapshot_early)
  double early_ms_ = 0;                       // the training thread's time taking it
  int64_t saves_ = 0;                    // checkpoints started by run()
  double save_stall_ms_ = 0;             // the training thread's time in checkpoint_boundary()
  double save_first_ms_ = 0;             // of it, the first save's (it reserves the host memory)
  double save_wait_ms_ = 0;              // of it, due saves waiting for the previous asynchronous one
  double end_wait_ms_ = 0;               // run()'s wait for the last asynchronous save
  int64_t snapshot_written_ = -1;        // the last step whose update wrote it
  double longest_step_ms_ = 0;           // a step and its boundary's work (validation, a save), the longest so far
  int stop_ = 0;                         // the agreed stop request of the last completed step (a signal; 0 none)
};

// One process (cfg.dp = tp = pp = 1; cfg.data required): trains, returns 0. Errors throw. Under
// mpirun, `shardtrain train` calls run_parallel_training (runtime/train/parallel_training.h),
// which honours the DP × TP × PP grid; this one would run an independent job per rank.
int run_training(const TrainConfig& cfg, const TrainSeams& seams = {});

}  // namespace st::runtime
