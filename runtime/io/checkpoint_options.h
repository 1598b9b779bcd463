// CheckpointOptions: where a run's checkpoints go, how often, how many stay, and what a run does
// with the ones it finds (resume, or write beside another run's only when told).
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"

namespace st::runtime {

struct CheckpointOptions {
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // 0: only at the end when a dir is set
  int64_t keep_checkpoints = 3;  // 0: all
  bool resume = false;
  bool overwrite_checkpoints = false;  // a fresh run may write into a dir holding checkpoints
  // The files written by a background thread while training goes on (the step boundary copies
  // this rank's share to host memory; at most one save in flight): runtime/train/async_checkpoint.h.
  bool async_checkpoint = false;
  // --resume from a checkpoint of ours that carries no checksums (written before 2026-12-03, or
  // stripped of them), read unchecked; false: refused (runtime/io/checkpoint_dir.h)
  bool allow_unchecked = false;
  // A stop request (SIGINT / SIGTERM, runtime/common/stop_request.h) saves a checkpoint at the
  // step every rank stops after, when a checkpoint_dir is set; false: the newest stays the last
  // periodic one.
  bool save_on_signal = true;
  // Not a flag: --checkpoint-dir named one step folder (ROOT/step_N); launch/ then sets
  // checkpoint_dir to ROOT and this to N, the step --resume continues (-1: ROOT's newest).
  int64_t resume_step = -1;

  void validate(const OptionFail& fail) const {
    require_non_negative(fail, "checkpoint-every", static_cast<double>(checkpoint_every));
    require_non_negative(fail, "keep-checkpoints", static_cast<double>(keep_checkpoints));
    if (resume && checkpoint_dir.empty()) fail("resume", "needs --checkpoint-dir");
    if (resume && overwrite_checkpoints)
      fail("overwrite-checkpoints", "a resumed run continues its checkpoints; drop one of --resume and --overwrite-checkpoints");
    if (checkpoint_every > 0 && checkpoint_dir.empty()) fail("checkpoint-every", "needs --checkpoint-dir");
  }
};

}  // namespace st::runtime
