// Per-step metrics: the JSONL line of docs/design.md's contract (rank 0 writes it) and the stdout
// step line. A non-finite value (the grad norm of a skipped fp16 step) is written as null.
//   {"step": 1, "loss": 5.55, "grad_norm": 1.55, "lr": 0.001, "loss_scale": 65536,
//    "skipped": false, "tokens_per_s": 1234.5, "step_ms": 12.3, "mfu": 0.41, "mem_bytes": 123456,
//    "mem_total_bytes": 150838624256, "mem_params": 1000, "mem_grads": 1000, "mem_optim": 2008,
//    "mem_act_peak": 5000, "mem_peak": 9100}
// plus "val_loss" on evaluation steps, with several ranks "mem_bytes_max" and
// "mem_bytes_max_rank": the largest rank's mem_bytes and that rank, which the step line shows, and
// under --precision fp8 "fp8_overflow" and "fp8_underflow": of the elements the step's FP8 casts
// converted (the blocks' GEMM inputs x and w, forward, and their output gradients, backward; every
// micro-batch; every rank, summed), how many the cast saturated (|x·s| rounds past the format's
// max) and how many nonzero ones it rounded to zero (ops/fp8_scaling.h); the step line shows them
// when nonzero. loss_scale is the scale the step ran with (1 unless fp16).
// mfu is null where the device has no known peak (the CPU; a GPU outside the table of
// runtime/observe/device_capacity.h); mem_total_bytes is the device's memory (CPU: MemTotal),
// 0 when unknown, and the step line shows mem_bytes as a fraction of it. mem_bytes: the
// allocator's peak since the start (on the model's device); the other mem_* fields are rank 0's
// tensor bytes by category during the step (tensor/memory_category.h): the peaks of its
// parameters, gradients, optimizer state, activations, and of all its tensors together.
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace st::runtime {

struct StepMetrics {
  int64_t step = 0;  // from 1
  double loss = 0, grad_norm = 0, lr = 0, loss_scale = 1;
  bool skipped = false;
  double tokens_per_s = 0, step_ms = 0;
  std::optional<double> mfu;  // model FLOPs over the device's dense peak; none without a peak
  int64_t mem_bytes = 0;
  int64_t mem_total_bytes = 0;  // of the device (CPU: MemTotal); 0: unknown
  int64_t mem_params = 0, mem_grads = 0, mem_optim = 0, mem_act_peak = 0, mem_peak = 0;
  // Several ranks: the largest mem_bytes of any rank and that rank (the lowest of a tie); the
  // step line shows it rather than rank 0's (a pipeline's stages differ). ranks 1: unset.
  int64_t mem_max_bytes = 0;
  int mem_max_rank = 0, ranks = 1;
  std::optional<double> val_loss;
  // --precision fp8: the step's FP8 casts' overflow and underflow counts (every rank's; none otherwise)
  std::optional<int64_t> fp8_overflow, fp8_underflow;
  nlohmann::ordered_json to_json() const;  // keys in the contract's order
  std::string line(int64_t total_steps) const;  // "step 3/10 | loss 5.5358 | lr 1.00e-03 | ..."
};

// Appends one JSON object per line; opened lazily, flushed every line. Path "" = disabled.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append);
  void write(const StepMetrics& m);

 private:
  std::string path_;
  std::ofstream out_;
};

// A resumed run's file cut back to the checkpoint it resumed from (rank 0, before appending), so
// the steps between that checkpoint and a crash are not in the file twice: keeps the lines whose
// "step" is ≤ `step`, in order, drops later steps and a torn last line (one that is not JSON; a complete last line missing
// only its newline is kept and completed);
// a line that is not JSON elsewhere is kept as it is. Rewritten atomically (temporary name,
// fsync, rename). Returns the number of lines dropped; no file: 0.
int64_t cut_metrics_back(const std::string& path, int64_t step);

// Reads a metrics file back (tests, tools); throws IOError naming the file and line.
std::vector<nlohmann::json> read_metrics(const std::string& path);

}  // namespace st::runtime
