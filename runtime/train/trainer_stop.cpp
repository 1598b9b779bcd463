// Trainer's end on a stop request (a signal; runtime/common/stop_request.h): the loop has run
// the step every rank agreed to stop after; here the signal's checkpoint and the record that
// launch/ turns into the closing line and the exit code; and the passes over --data (a warning when
// a step reads more sequences than the file holds, the epochs at the end).
#include <cstdio>
#include <iostream>

#include "runtime/common/stop_request.h"
#include "runtime/data/data_spec.h"
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

void Trainer::data_passes_note(bool at_start) const {
  if (cfg_.data.empty()) return;
  const int64_t T = w_.source->seq_len(), G = w_.source->global_batch();
  const int64_t n = open_token_source(cfg_.data)->num_sequences(T);  // mapped, not read (a file, corpus or mixture)
  if (n <= 0) return;
  const double per_step = static_cast<double>(G) / static_cast<double>(n);
  auto g3 = [](double v) {  // 3 significant digits: 4.44, 20, 0.25
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return std::string(b);
  };
  if (at_start && G > n) {
    std::cout << "warning: " << cfg_.data << " holds " << n << (n == 1 ? " sequence" : " sequences") << " of " << T
              << " tokens and a step reads " << G << ": every step repeats sequences (" << g3(per_step)
              << " epochs a step; --steps " << cfg_.steps << " is " << g3(per_step * static_cast<double>(cfg_.steps))
              << " epochs)\n";
  } else if (!at_start && per_step * static_cast<double>(step_) > 1.0) {
    std::cout << "data: " << g3(per_step * static_cast<double>(step_)) << " epochs over " << cfg_.data << " (" << n
              << (n == 1 ? " sequence of " : " sequences of ") << T << " tokens, " << G << " a step)\n" << std::flush;
  }
}

}  // namespace st::runtime
