// The training loop. One optimizer step, in DESIGN.md's order, each part a separate function so
// that data parallelism and pipelines plug in (TrainerParts):
//   1. zero the gradients
//   2. GradientSource::compute_gradients — forward/backward over this rank's micro-batches, loss
//      scaled by loss_scale/(K·dp) (runtime/gradient_source.h; a pipeline replaces this)
//   3. the gradients-complete hook (the DP reducer waits for its bucket all-reduces here)
//   4. one ops::grad_stats pass over the raw gradients (their own dtype, no copies): the
//      unscaled local norm² and the inf/NaN flag, read to the host once; the flag agreed by
//      flag_reduction (or grad_reduction).allreduce_max (fp16)
//   5. skipped step (fp16 overflow): the scale halves, nothing else changes
//      else: global norm² by grad_reduction.allreduce_sum, lr from the schedule, optimizer step
//      on the raw gradients with 1/scale and the clip coefficient applied in its kernels (f32
//      masters, low-precision copies rewritten), loss scaler update
//   6. metrics: loss (loss_reduction.allreduce_sum of the local shares), JSONL + stdout on rank 0
// Checkpoints (runtime/train_checkpoint.h) every cfg.checkpoint_every steps and at the end;
// --resume takes the newest complete one and continues bit-exactly (same data order, same
// dropout stream, same optimizer and scaler state).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "runtime/gradient_source.h"
#include "runtime/language_model.h"
#include "runtime/lr_schedule.h"
#include "runtime/metrics.h"
#include "runtime/mixed_precision.h"
#include "runtime/optimizer.h"
#include "runtime/reductions.h"
#include "runtime/train_checkpoint.h"
#include "runtime/train_config.h"

namespace st::runtime {

// What prepare_training() sets up for one replica: the model in f32 on its device (fresh, from
// --init-from, or shaped like the newest checkpoint when resuming), the token file (its ids
// checked against the vocabulary) and the batch layout.
struct TrainInputs {
  std::shared_ptr<LanguageModel> model;
  std::shared_ptr<TokenData> data;
  BatchLayout layout;
  std::string resume_path;  // newest complete checkpoint under cfg.checkpoint_dir with --resume, else ""
  Device device = Device::cpu;
};
// With a tp group of several ranks the model is the family's tensor-parallel variant.
TrainInputs prepare_training(const TrainConfig& cfg, int64_t dp = 1, int64_t replica = 0,
                             std::shared_ptr<comm::Communicator> tp = nullptr);

// What a distributed trainer replaces. Defaults: one process.
struct TrainerParts {
  std::unique_ptr<GradientSource> source;          // required
  std::shared_ptr<Reductions> loss_reduction;      // null: identity
  std::shared_ptr<Reductions> grad_reduction;      // null: identity
  // The fp16 inf/NaN verdict, agreed by every rank so all skip or step together; null: grad_reduction.
  std::shared_ptr<Reductions> flag_reduction;
  std::function<void()> gradients_complete;        // null: nothing to wait for
  std::function<void()> zero_grad;                 // null: drop every .grad() (a DP reducer instead
                                                   // zeroes its buckets, keeping grads as views)
  int rank = 0;                                    // rank 0 writes metrics, stdout and checkpoints
  int world_size = 1;                              // ranks taking part (the trace merges their parts)
  std::function<void()> barrier;                   // over those ranks; null with one rank
  BatchLayout layout;                              // recorded in checkpoints
  // ---- sharded layouts (pipeline stages) ---------------------------------------------------
  // Weight of a parameter's squared gradient in this rank's share of the global norm (0 for a
  // copy that another rank of grad_reduction's group also counts); null: 1 for every parameter.
  std::function<double(const std::string& name)> norm_weight;
  // Collective over all ranks: the union of every rank's tensors by name, on rank 0 (weights,
  // optimizer state); null: this rank holds everything and rank 0 saves alone.
  std::function<NamedTensors(const NamedTensors& local, const std::string& what)> gather_state;
  // This rank's model is a part of the checkpoint (a pipeline stage): resume loads the names it
  // holds instead of insisting on an exact match.
  bool partial_state = false;
  // Full optimizer state by name → this rank's shards (tensor parallel); null: as loaded.
  std::function<std::map<std::string, Tensor>(const std::map<std::string, Tensor>&)> shard_loaded_state;
  // ---- ZeRO-1 --------------------------------------------------------------------------------
  // The optimizer covers only the parameters this accepts (its shard); null: all of them.
  std::function<bool(const std::string& name)> optimizer_owns;
  // After each optimizer step that was taken (e.g. all-gather the updated shards).
  std::function<void()> after_step;
};

class Trainer {
 public:
  // One process: builds the model (cfg.model / cfg.init_from, or the newest checkpoint under
  // cfg.checkpoint_dir with cfg.resume), the data (cfg.data, required) and the parts.
  explicit Trainer(const TrainConfig& cfg);
  // With a model built by the caller in f32 (parameters on cfg.device) and the parts wired to
  // it. `resume_from`: a checkpoint directory to restore, "" for none.
  Trainer(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, TrainerParts parts,
          const std::string& resume_from = "");

  StepMetrics train_step();           // runs step number step() (from 0) and returns its metrics
  void run();                         // steps until cfg.steps, logging and checkpointing
  std::string save_checkpoint();      // under cfg.checkpoint_dir; returns the directory
  double evaluate(const TokenData& val, int64_t max_batches = 8);  // mean loss, no gradients

  int64_t step() const { return step_; }
  LanguageModel& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  LossScaler& scaler() { return scaler_; }
  const TrainConfig& config() const { return cfg_; }
  // The parts may be rewired after construction (e.g. a DP reducer built over the parameters
  // once the optimizer has cast them to the compute dtype).
  TrainerParts& parts() { return parts_; }
  const std::string& resumed_from() const { return resumed_from_; }
  TrainState state() const;

 private:
  void init(const std::string& resume_from);
  // The raw gradients (dtype as accumulated, loss-scaled), aligned with the optimizer's params.
  std::vector<Tensor> collect_grads();
  std::vector<double> norm_weights() const;  // parts_.norm_weight per optimizer param; {} = all 1

  TrainConfig cfg_;
  std::shared_ptr<LanguageModel> model_;
  TrainerParts parts_;
  std::unique_ptr<Optimizer> opt_;
  LossScaler scaler_{false};
  Precision precision_ = Precision::fp32;
  LrSchedule schedule_;
  int64_t step_ = 0;
  std::string resumed_from_;
  std::shared_ptr<const TokenData> val_data_;
};

// `shardtrain train` (launch/ fills cfg, including cfg.data): trains, returns 0. Errors throw.
int run_training(const TrainConfig& cfg);

}  // namespace st::runtime
