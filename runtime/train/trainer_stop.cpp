// Trainer's end on a stop request (a signal; runtime/common/stop_request.h): the loop has run
// the step every rank agreed to stop after; here the signal's checkpoint and the record that
// launch/ turns into the closing line and the exit code.
#include "runtime/common/stop_request.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/train/trainer.h"

namespace st::runtime {

void Trainer::finish_stop() {
  StopRecord rec;
  rec.signal = stop_;
  rec.step = step_;
  rec.steps = cfg_.steps;
  if (!cfg_.checkpoint_dir.empty()) {
    if (checkpoint_due(step_)) {
      rec.saved = true;  // checkpoint_boundary saved this step (an asynchronous save commits below)
    } else if (cfg_.save_on_signal) {
      const Clock::time_point t0 = Clock::now();
      wait_for_save();  // at most one save in flight
      save_checkpoint();  // collective: every rank stops after the same step
      const double ms = ms_since(t0);
      if (++saves_ == 1) save_first_ms_ = ms;
      save_stall_ms_ += ms;
      rec.saved = true;
    }
    wait_for_save();  // an asynchronous save in flight commits before the newest is named
    if (rank() == 0) rec.checkpoint = CheckpointDir(cfg_.checkpoint_dir).latest();
  }
  record_stop(rec);
}

}  // namespace st::runtime
