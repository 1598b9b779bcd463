// Refusing a model that cannot fit before a byte of it is allocated. Without it a run asked for
// `--layers 1000000000` allocates layer after layer until the kernel's OOM killer ends it with
// no message (45 s on a 24 GiB machine).
//
// The estimate is a lower bound, parameters only (no activations, no buffers):
//   parameters P    the family's closed form from the config (ModelFactory::param_count; the GPT:
//                   12·L·C² + 13·L·C + C·(V + T) + 2·C)
//   bytes per P     weights + gradients + optimizer state:
//                     fp32       4 + 4               + state
//                     fp16/bf16  2 + 4 (f32 master) + 2 + state
//                   state: AdamW 8 (two f32 moments), SGD 4 (momentum), + 12 where the run keeps
//                   the optimizer's snapshot block (keeps_snapshot_block); under ZeRO-1 (dp > 1) the
//                   master and the state are this rank's 1/dp, under ZeRO-2 the gradients too
//                   (what it holds after the reduce; backward's peak is above that, grad_reducer.h),
//                   under ZeRO-3 the weights too (their shards; the gathered layers come on top,
//                   runtime/parallel/zero3.h)
//   this rank       P · bytes / (tp · pp)
// against what this rank could get: MemAvailable (/proc/meminfo, lowered to the cgroup's limit
// when there is one) on the CPU, the device's free memory (plus the allocator's cache) on CUDA.
// A family that registers no param_count is not checked.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/setup/train_config.h"

namespace st::runtime {

// Bytes each parameter costs on a rank that holds all of it (no sharding): the weight and its
// gradient in the compute dtype, the f32 master under fp16/bf16, the optimizer's state. The
// memory planner (memory_plan.h) shards these per ZeRO stage; the check below uses them whole
// (ZeRO-1: master and state / dp).
struct ParamBytes {
  double weight = 0, grad = 0, master = 0, state = 0;
  double snapshot = 0;  // the optimizer's snapshot block (keeps_snapshot_block): 12
};
ParamBytes param_bytes(Precision precision, OptimizerKind optimizer, bool snapshot_block = false);

struct MemoryEstimate {
  double params = 0;           // the whole model's
  double bytes_per_param = 0;  // as above, with the ZeRO share folded in
  double rank_bytes = 0;       // params · bytes_per_param / (tp · pp)
  std::string formula;         // "fp32 weights 4 + grads 4 + AdamW moments 8"
};
// params < 0: the family does not say.
// `entry` is the model entry ({"family", "config"}, model_registry.h) the run will build.
MemoryEstimate estimate_training_memory(const TrainConfig& cfg, const nlohmann::json& entry, int64_t tp, int64_t dp);

struct AvailableMemory {
  double bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "free on the CUDA device", ...
};
AvailableMemory available_memory(Device device);

// Throws OutOfMemoryError naming the estimate and what is available when the estimate exceeds it.
void check_fits_in_memory(const TrainConfig& cfg, const nlohmann::json& entry, int64_t tp, int64_t dp);

// "1.5 GiB", "714.3 TiB"
std::string human_bytes(double bytes);

}  // namespace st::runtime
