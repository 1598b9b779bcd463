// TrainConfig: every option of `shardtrain train` (DESIGN.md's CLI contract), as plain data.
// launch/ fills it from YAML and flags and validates it; runtime/ only reads it.
#pragma once
#include <cstdint>
#include <string>

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
  std::string schedule = "1f1b";     // gpipe | 1f1b
  std::string partition = "params";  // uniform | params | profile
  std::string comm = "auto";         // auto | nccl | mpi
  // batch
  int64_t micro_batch = 4;  // sequences per micro-batch per DP replica
  int64_t grad_accum = 1;   // micro-batches per optimizer step per replica (pipeline m)
  // numerics
  std::string precision = "fp32";  // fp32 | fp16 | bf16
  std::string device = "cpu";      // cpu | cuda
  uint64_t seed = 1;
  bool recompute = false;
  bool zero = false;
  std::string grad_comm_dtype = "fp32";  // fp32 | bf16 | fp16 (DP gradient all-reduce)
  double bucket_mb = 25.0;              // DP bucket size
  // optimizer
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;  // sgd
  double clip = 1.0;      // 0: no clipping
  std::string lr_schedule = "const";  // const | cosine
  int64_t warmup = 0;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr
  // run
  int64_t steps = 10;  // the run's total; a resumed run goes on to it
  std::string data;    // token .bin; empty: the built-in corpus
  std::string val_data;
  int64_t eval_every = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  bool resume = false;
  std::string metrics;  // JSONL path (rank 0 writes)
  std::string trace;    // Chrome trace JSON path
  double timeout_s = 300.0;
  int64_t log_every = 1;
  bool progress = true;  // progress bar on a terminal
};

}  // namespace st::runtime
