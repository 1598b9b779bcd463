// The start-of-run look at --checkpoint-dir (runtime/setup/checkpoint_guard.h).
#include "runtime/setup/checkpoint_guard.h"

#include <vector>

#include "runtime/io/checkpoint_dir.h"

namespace st::runtime {

std::string check_checkpoint_dir(const TrainConfig& cfg, comm::Communicator* world) {
  if (cfg.checkpoint_dir.empty()) return "";
  // rank 0's view: the number of complete checkpoints and the newest step
  std::vector<int64_t> found{0, 0};
  if (!world || world->rank() == 0) {
    const std::vector<int64_t> steps = CheckpointDir(cfg.checkpoint_dir).complete_steps();
    found = {static_cast<int64_t>(steps.size()), steps.empty() ? 0 : steps.back()};
  }
  if (world && world->size() > 1) {
    Tensor t = Tensor::from_vector(found, {2});  // (2,) i64: count, newest step
    if (std::string(world->backend()) == "nccl") t = t.to(Device::cuda);
    world->broadcast(t, 0)->wait();
    t = t.to(Device::cpu);
    found = {t.data<int64_t>()[0], t.data<int64_t>()[1]};
  }
  const int64_t count = found[0], newest = found[1];
  if (cfg.resume)
    return count == 0 ? "--resume: no checkpoint in " + cfg.checkpoint_dir + " yet; starting fresh" : "";
  if (count == 0) return "";
  const std::string what = std::to_string(count) + (count == 1 ? " checkpoint" : " checkpoints") + " (newest step " +
                           std::to_string(newest) + ")";
  if (cfg.overwrite_checkpoints)
    return "--overwrite-checkpoints: writing into " + cfg.checkpoint_dir + ", which holds " + what +
           " of another run";
  ST_THROW(ValueError, "--checkpoint-dir " << cfg.checkpoint_dir << " already holds " << what
                                           << " of another run: continue it with --resume 1, or give a new "
                                              "--checkpoint-dir (--overwrite-checkpoints 1 writes there anyway)");
}

}  // namespace st::runtime
