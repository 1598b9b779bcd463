// TrainConfig: every option of `shardtrain train` (docs/design.md's CLI contract), as typed data,
// composed of one small struct per subsystem, each defined and validated in its wing:
//   ModelOptions       runtime/nn/model_options.h          the family and its sizes
//   ParallelOptions    runtime/parallel/parallel_options.h dp, tp, ZeRO, gradient communication
//   PipelineOptions    runtime/pipeline/pipeline_options.h pp, schedule, chunks, partition
//   DataOptions        runtime/data/data_options.h         token files, order, micro-batch, accumulation
//   PrecisionOptions   runtime/optim/precision_options.h   precision, TF32, the non-finite rule
//   OptimizerOptions   runtime/optim/optimizer_options.h   optimizer, clipping, lr schedule
//   CheckpointOptions  runtime/io/checkpoint_options.h     where, how often, resume
//   ObserveOptions     runtime/observe/observe_options.h   metrics, trace, step lines
//   RunOptions         (below)                             device, seed, steps, memory, the graph
// Code takes the struct it needs (a TrainConfig is each of them, so it converts); the run's own
// validate() runs every part's and then the rules that join two subsystems. launch/ fills it from
// YAML and flags (each enum parsed once, through its EnumNames table); runtime/ only reads it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/common/device_names.h"
#include "runtime/common/option_check.h"
#include "runtime/data/data_options.h"
#include "runtime/io/checkpoint_options.h"
#include "runtime/nn/model_options.h"
#include "runtime/observe/observe_options.h"
#include "runtime/optim/optimizer_options.h"
#include "runtime/optim/precision_options.h"
#include "runtime/optim/precision_policy.h"
#include "runtime/parallel/parallel_options.h"
#include "runtime/pipeline/pipeline_options.h"

namespace st::runtime {

struct RunOptions {
  Device device = Device::cpu;
  uint64_t seed = 1;
  int64_t steps = 10;  // the run's total; a resumed run goes on to it
  bool recompute = false;
  bool cuda_graph = true;  // the step as one CUDA graph where it applies (runtime/train/train_step.h)
  // The LM head fused with the cross-entropy in row chunks (ops/lm_head_loss.h): no (B·T, V)
  // logits in training. Not under tp > 1 or ZeRO-3 (those keep the unfused head: Trainer::init).
  bool chunked_head = false;
  // The cap on this process's tensor bytes on its device, in GiB (0: none): an allocation past
  // it throws OutOfMemoryError naming what it was for (tensor/memory_category.h).
  double max_memory_gib = 0;
  double timeout_s = 300.0;

  void validate(const OptionFail& fail) const {
    require_positive(fail, "steps", static_cast<double>(steps));
    require_non_negative(fail, "max-memory", max_memory_gib);
    if (timeout_s <= 0) fail("timeout-s", "must be positive, got " + option_str(timeout_s));
  }
};

struct TrainConfig : ModelOptions,
                     ParallelOptions,
                     PipelineOptions,
                     DataOptions,
                     PrecisionOptions,
                     OptimizerOptions,
                     CheckpointOptions,
                     ObserveOptions,
                     RunOptions {
  // Every part's validate(), then the rules between parts (tensor parallelism and the family,
  // heads over tp, stages over layers, ZeRO and the optimizer). Files are not looked at.
  void validate(const OptionFail& fail = throw_on_fail) const;
  // --cp > 1: T over 2·cp, and the flags not wired with context parallelism refused (pp, ZeRO,
  // sequence parallelism, dropout, fp8), each in one line naming --cp and the other flag.
  void validate_context_parallel(const OptionFail& fail) const;
};

// Whether a run keeps the optimizer's snapshot block for its asynchronous saves
// (runtime/optim/optimizer.h keep_snapshot): --async-checkpoint 1 with a checkpoint directory,
// AdamW, on CUDA — 12 bytes a parameter of the optimizer's share, for the whole run (the planner
// and the memory check count them).
inline bool keeps_snapshot_block(const TrainConfig& c) {
  return c.async_checkpoint && !c.checkpoint_dir.empty() && c.optimizer == OptimizerKind::adamw &&
         c.device == Device::cuda;
}

// The run's precision policy: --precision, --grad-comm-dtype, --fp8-scaling, --fp8-amax-history.
inline PrecisionPolicy precision_policy(const TrainConfig& c) {
  return precision_policy(c.precision, c.grad_comm_dtype, c.fp8_scaling, c.fp8_amax_history);
}

// How often a run validates: eval_every, or with val_data and eval_every 0 every max(1, steps / 10)
// steps; 0 (never) without val_data.
inline int64_t eval_interval(const TrainConfig& c) {
  if (c.val_data.empty()) return 0;
  return c.eval_every > 0 ? c.eval_every : std::max<int64_t>(1, c.steps / 10);
}

}  // namespace st::runtime
