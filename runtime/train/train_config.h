// TrainConfig: every option of `shardtrain train` (docs/design.md's CLI contract), as typed
// data. launch/ fills it from YAML and flags (each enum parsed once, through its EnumNames
// table) and validates it; runtime/ only reads it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "comm/comm_options.h"
#include "runtime/common/device_names.h"
#include "runtime/common/partition.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/pipeline/pipeline_schedule.h"

namespace st::runtime {

struct TrainConfig {
  // model
  std::string model = "gpt";  // gpt | simple-transformer | mlp
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t vocab = 256;
  int64_t seq_len = 0;  // 0: the model's context length (n_positions for an HF init, else 64)
  std::string init_from;  // HF dir (model.safetensors + config.json); sizes then come from it
  double dropout = -1;    // every dropout layer's p; < 0: the model's own (GPT 0 / config.json's, ST 0.1)
  // layout
  int64_t dp = 0;  // 0: world / (tp · pp)
  int64_t tp = 1;
  int64_t pp = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int64_t virtual_stages = 1;  // model chunks per pipeline stage (interleaved schedule: ≥ 2)
  PartitionKind partition = PartitionKind::params;
  std::string comm = "auto";         // auto | nccl | mpi
  // batch
  int64_t micro_batch = 4;  // sequences per micro-batch per DP replica
  int64_t grad_accum = 1;   // micro-batches per optimizer step per replica (pipeline m)
  // numerics
  Precision precision = Precision::fp32;
  Device device = Device::cpu;
  uint64_t seed = 1;
  bool recompute = false;
  bool cuda_graph = true;  // the step as one CUDA graph where it applies (runtime/train/cuda_graph_step.h)
  // GPT's LM head fused with the cross-entropy in row chunks (ops/lm_head_loss.h): no (B·T, V)
  // logits in training. Not under tp > 1 or ZeRO-3 (those keep the unfused head: Trainer::init).
  bool chunked_head = false;
  bool tf32 = false;  // CUDA f32 GEMMs on TF32 tensor cores (ops/matmul.h set_gemm_allow_tf32); false: exact
  int64_t zero = 0;  // ZeRO stage: 0 off, 1 optimizer state sharded, 2 also the gradients, 3 also the parameters (runtime/parallel/zero3.h)
  Precision grad_comm_dtype = Precision::fp32;  // dtype of the DP / ZeRO gradient all-reduce
  double bucket_mb = 25.0;              // DP / ZeRO bucket size
  // The cap on this process's tensor bytes on its device, in GiB (0: none): an allocation past
  // it throws OutOfMemoryError naming what it was for (tensor/memory_category.h).
  double max_memory_gib = 0;
  // fp32/bf16: a step whose loss or grad norm is inf/NaN is skipped; this many in a row stop the
  // run (fp16: overflows at the loss scale's floor). 0: never stop.
  int64_t max_nonfinite_steps = 1;
  // optimizer
  OptimizerKind optimizer = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;  // sgd
  double clip = 1.0;      // 0: no clipping
  LrScheduleKind lr_schedule = LrScheduleKind::constant;
  int64_t warmup = 0;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr
  // run
  int64_t steps = 10;  // the run's total; a resumed run goes on to it
  std::string data;    // token .bin (required; the CLI substitutes the built-in corpus when --data is absent)
  std::string val_data;
  int64_t eval_every = 0;  // 0: with val_data every eval_interval() steps (below), else never
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  bool resume = false;
  bool overwrite_checkpoints = false;  // a fresh run may write into a dir holding checkpoints
  bool shuffle = false;  // sequences in a permuted order per pass, seeded by `seed` (runtime/data/token_data.h)
  std::string metrics;  // JSONL path (rank 0 writes)
  std::string trace;    // Chrome trace JSON path
  double timeout_s = 300.0;
  // On a deadline every rank's flight recorder as JSON in this directory ("": none), handed to
  // comm as CommOptions::flight_recorder_dump.
  std::string flight_recorder_dump;
  int64_t log_every = 1;
  bool progress = true;  // progress bar when stdout is a terminal
  // comm/'s settings (debug mode, p2p mode, max count, CUDA-aware MPI): not flags — launch/ fills
  // them from the environment (launch/comm_env.h), tests set them.
  comm::CommOptions comm_options;
};

// How often a run validates: eval_every, or with val_data and eval_every 0 every max(1, steps / 10)
// steps; 0 (never) without val_data.
inline int64_t eval_interval(const TrainConfig& c) {
  if (c.val_data.empty()) return 0;
  return c.eval_every > 0 ? c.eval_every : std::max<int64_t>(1, c.steps / 10);
}

}  // namespace st::runtime
