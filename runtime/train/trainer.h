// The training loop. One optimizer step, in docs/design.md's order; what a layout changes is
// passed in as TrainerWiring (below):
//   1. GradientSync::begin_step — clear or zero the gradients
//   2. GradientSource::compute_gradients — forward/backward over this rank's micro-batches, loss
//      scaled by loss_scale/(K·dp) (runtime/train/gradient_source.h; a pipeline replaces it)
//   3. GradientSync::finish — the DP / ZeRO reducer waits for its bucket all-reduces, tied
//      weights sum (runtime/parallel/gradient_sync.h)
//   4. one ops::grad_stats pass over the raw gradients (their own dtype, no copies): the
//      unscaled local norm² and the inf/NaN flag, read to the host once; the flag agreed by
//      reductions.flag
//   5. skipped step (inf/NaN gradients or loss, agreed by every rank): nothing changes but the
//      fp16 scale, which halves; cfg.max_nonfinite_steps in a row (fp16: at the scale's floor)
//      stop the run (runtime/train/nonfinite.h)
//      else: global norm² by reductions.grad, lr from the schedule, optimizer step on the raw
//      gradients with 1/scale and the clip coefficient applied in its kernels (f32 masters,
//      low-precision copies rewritten), loss scaler update
//   6. GradientSync::end_step (ZeRO broadcasts the owners' updated buckets)
//   7. metrics: loss (reductions.loss of the local shares), JSONL + stdout on rank 0
// With --cuda-graph 1 (one process on CUDA) steps 1-6 are one captured CUDA graph, the same bits
// (runtime/train/cuda_graph_step.h).
// Checkpoints (runtime/train/train_checkpoint.h) every cfg.checkpoint_every steps and at the end;
// --resume takes the newest complete one and continues bit-exactly (same data order, same
// dropout stream, same optimizer and scaler state).
#pragma once
#include <memory>
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
#include "runtime/train/cuda_graph_step.h"
#include "runtime/train/gradient_source.h"
#include "runtime/train/nonfinite.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/train_config.h"

namespace st::runtime {

class Progress;

// The model a run trains, decided before anything is built: the newest checkpoint's with
// --resume, else the options'; its {"family", "config"} entry and its layers' description
// (runtime/train/model_registry.h), from which a pipeline partition is cut.
struct ModelPlan {
  nlohmann::json entry;
  std::string resume_path;  // newest complete checkpoint under cfg.checkpoint_dir with --resume, else ""
  ModelDescription description;
  int64_t seq_len = 0;  // the run's T: --seq-len, or the model's context length
};
// tp and dp size the memory check (memory_check.h) that refuses a model this rank cannot hold.
ModelPlan plan_model(const TrainConfig& cfg, int64_t tp = 1, int64_t dp = 1);

// What prepare_training() sets up for one replica: the model's layers this rank holds, in f32 on
// its device (filled from the seed or --init-from; when resuming, shaped like the checkpoint and
// filled by the Trainer; with `sharded_start`, ZeRO-3's, without any bytes: names and shapes only,
// each rank's pieces filled by the Trainer through Zero3::shard), the token file (its ids checked
// against the vocabulary) and the batch layout.
struct TrainInputs {
  std::shared_ptr<LanguageModel> model;
  std::shared_ptr<TokenData> data;
  BatchLayout layout;
  std::string resume_path;  // = plan.resume_path
  Device device = Device::cpu;
};
// With a tp group of several ranks the model is the family's tensor-parallel variant; `layers`
// is the range a pipeline stage holds (default: all).
TrainInputs prepare_training(const TrainConfig& cfg, const ModelPlan& plan, std::vector<LayerRange> layers = {}, int64_t dp = 1,
                             int64_t replica = 0, std::shared_ptr<comm::Communicator> tp = nullptr,
                             bool sharded_start = false);

// What a layout plugs into the step, built before the Trainer (runtime/train/parallel_training.cpp
// builds one per axis); every member has a one-process default.
struct StepReductions {
  std::shared_ptr<Reductions> loss;  // this rank's loss share → the global mean; null: identity
  std::shared_ptr<Reductions> grad;  // this rank's Σg² → the global Σg²; null: identity
  std::shared_ptr<Reductions> flag;  // the fp16 inf/NaN verdict, agreed by every rank; null: grad
};
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
  std::shared_ptr<Zero3> zero3;                 // ZeRO-3: the optimizer steps its pieces (runtime/parallel/zero3.h); null: none
  std::shared_ptr<comm::Communicator> world;    // every rank of the job; null: one process
  BatchLayout layout;                           // recorded in checkpoints
};

class Trainer {
 public:
  // One process: builds the model (cfg.model / cfg.init_from, or the newest checkpoint under
  // cfg.checkpoint_dir with cfg.resume), the data (cfg.data, required) and the parts.
  explicit Trainer(const TrainConfig& cfg);
  // With a model built by the caller in f32 (parameters on cfg.device) and the layout's parts
  // wired to it. `resume_from`: a checkpoint directory to restore, "" for none.
  Trainer(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, TrainerWiring wiring,
          const std::string& resume_from = "");

  StepMetrics train_step();           // runs step number step() (from 0) and returns its metrics
  // Steps until cfg.steps, logging and checkpointing; at the end rank 0 prints every rank's
  // memory (runtime/observe/memory_report.h; one collective over the world).
  void run();
  std::string save_checkpoint();      // under cfg.checkpoint_dir (collective); the directory on rank 0
  double evaluate(const TokenData& val, int64_t max_batches = 8);  // mean loss, no gradients

  int64_t step() const { return step_; }
  LanguageModel& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  LossScaler& scaler() { return scaler_; }
  const TrainConfig& config() const { return cfg_; }
  const std::string& resumed_from() const { return resumed_from_; }
  bool cuda_graph() const { return use_graph_; }  // steps run as a CUDA graph (--cuda-graph 1 where it applies)
  TrainState state() const;

 private:
  void init(const std::string& resume_from);
  // ZeRO-3: this rank's pieces, each filled from the checkpoint (resume), --init-from or the seed.
  NamedTensors shard_zero3(const std::string& resume_path, const OpenedCheckpoint& ckpt);
  // The raw gradients (dtype as accumulated, loss-scaled), aligned with the optimizer's params.
  std::vector<Tensor> collect_grads();
  std::vector<double> norm_weights() const;
  void eager_step(StepMetrics& m);  // steps 1-7 of the header, host-driven
  // A graph step launched (its metrics' step, lr and memory filled) whose report is not read yet.
  struct GraphPending {
    StepMetrics m;
    Clock::time_point t0;  // when it was launched
    bool eager = false;    // run eagerly instead (the warm-up could not be captured): m is complete
  };
  GraphPending launch_graph_step();                           // advances step()
  StepMetrics complete_graph_step(const GraphPending& p);     // waits for its report
  bool sync_due(int64_t step) const;  // after `step` (from 1): a checkpoint, validation or the end
  void emit(const StepMetrics& m, MetricsWriter& metrics, Progress& bar);  // run()'s per-step work
  void record_memory(StepMetrics& m, Device device) const;   // the mem_* fields from the allocators
  // step time (t0 → t1), throughput, MFU
  StepMetrics finish_metrics(StepMetrics m, Clock::time_point t0, Device device, Clock::time_point t1 = Clock::now());
  int rank() const { return w_.world ? w_.world->rank() : 0; }

  TrainConfig cfg_;
  std::shared_ptr<LanguageModel> model_;
  TrainerWiring w_;
  std::unique_ptr<Optimizer> opt_;
  LossScaler scaler_{false};
  NonFiniteGuard nonfinite_{Precision::fp32, 1};  // stops a run that stays inf/NaN (runtime/train/nonfinite.h)
  LrSchedule schedule_;
  int64_t step_ = 0;
  std::string resumed_from_;
  std::shared_ptr<const TokenData> val_data_;
  RankMemory memory_;  // this rank's bytes, for the table at the end of run()
  bool use_graph_ = false;                // --cuda-graph 1 and it applies (runtime/train/cuda_graph_step.h)
  std::unique_ptr<CudaGraphStep> graph_;  // made at the first step
  StepMetrics graph_memory_;              // mem_* of the captured step (replays allocate nothing)
  Clock::time_point graph_last_done_{};   // when the host saw the last graph step complete
};

// One process (cfg.dp = tp = pp = 1; cfg.data required): trains, returns 0. Errors throw. Under
// mpirun, `shardtrain train` calls run_parallel_training (runtime/train/parallel_training.h),
// which honours the DP × TP × PP grid; this one would run an independent job per rank.
int run_training(const TrainConfig& cfg);

}  // namespace st::runtime
