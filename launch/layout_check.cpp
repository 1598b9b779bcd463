// The job's ranks against the layout, and the flags without effect (launch/layout_check.h).
#include "launch/layout_check.h"

#include "launch/launch_command.h"
#include "launch/options.h"
#include "runtime/parallel/parameter_sharding.h"

namespace st::launch {

void check_job_ranks(const runtime::TrainConfig& c, int world, const std::vector<std::string>& args) {
  const int64_t tp_pp = c.tp * c.cp * c.pp;  // the ranks of one replica
  const bool gpus = c.device == Device::cuda;
  const std::string started = world == 1 ? " (started without mpirun)" : "";
  if (c.dp == 0) {
    if (world % tp_pp == 0) return;
    ST_THROW(UsageError, "--tp " << c.tp << (c.cp > 1 ? " x --cp " + std::to_string(c.cp) : std::string()) << " x --pp " << c.pp << " needs a multiple of " << tp_pp << " ranks (dp = ranks / "
                               << tp_pp << "); this job has " << world << started << ": run "
                               << launch_line(tp_pp, gpus, "train", args));
  }
  const int64_t need = c.dp * tp_pp;
  if (need == world) return;
  ST_THROW(UsageError, "the layout dp " << c.dp << " x tp " << c.tp << (c.cp > 1 ? " x cp " + std::to_string(c.cp) : std::string())
                                        << " x pp " << c.pp << " needs " << need
                                        << " ranks; this job has " << world << started << ": run "
                                        << launch_line(need, gpus, "train", args));
}

std::vector<std::string> no_effect_notes(const runtime::TrainConfig& c, int64_t dp) {
  std::vector<std::string> notes;
  // the gradients go between dp × cp replicas (ZeRO shards over them)
  const int zero = runtime::zero_stage_in_effect(c.zero, dp * c.cp);
  if (c.zero > 0 && zero == 0)
    notes.push_back("--zero " + std::to_string(c.zero) +
                    ": no effect at dp 1 (ZeRO shards over the data-parallel replicas; this run has one)");
  if (c.grad_comm_dtype != runtime::Precision::fp32 && dp * c.cp == 1)
    notes.push_back("--grad-comm-dtype " + runtime::to_string(c.grad_comm_dtype) +
                    ": no effect at dp 1 (no gradient goes between data-parallel replicas)");
  if (c.tf32 && c.device == Device::cpu)
    notes.push_back("--tf32 1: no effect on the CPU (TF32 is a mode of NVIDIA's tensor cores; CPU products stay exact f32)");
  if (c.fp8_amax_history != 16 && c.fp8_scaling != ops::Fp8ScaleMode::delayed)
    notes.push_back("--fp8-amax-history " + std::to_string(c.fp8_amax_history) +
                    ": no effect without --fp8-scaling delayed (current scaling keeps no history)");
  if (c.chunked_head && c.model != "gpt")
    notes.push_back("--chunked-head 1: no effect on the " + c.model + " model (the GPT's head only)");
  else if (c.chunked_head && (c.tp > 1 || zero == 3))
    notes.push_back(std::string("--chunked-head 1: no effect under ") + (c.tp > 1 ? "tp > 1" : "ZeRO-3") +
                    " (it keeps the unfused head)");
  if (c.sequence_parallel == 1 && c.tp == 1)
    notes.push_back("--sequence-parallel 1: no effect at tp 1 (it splits the sequence over the tensor-parallel ranks)");
  return notes;
}

}  // namespace st::launch
