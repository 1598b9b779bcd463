// ObserveOptions: what a run shows — the metrics file, the trace, the step lines and the bar, and
// where a deadline's flight recorder goes.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"

namespace st::runtime {

struct ObserveOptions {
  std::string metrics;  // JSONL path (rank 0 writes)
  std::string trace;    // Chrome trace JSON path
  int64_t log_every = 1;
  bool progress = true;  // progress bar when stdout is a terminal
  // On a deadline every rank's flight recorder as JSON in this directory ("": none), handed to
  // comm as CommOptions::flight_recorder_dump.
  std::string flight_recorder_dump;
  // The run's folder (launch/run_dir.h): launch/ puts the checkpoints, metrics and resolved config
  // under it; the runtime reads only checkpoint_dir and metrics.
  std::string run_dir;

  void validate(const OptionFail& fail) const { require_positive(fail, "log-every", static_cast<double>(log_every)); }
};

}  // namespace st::runtime
