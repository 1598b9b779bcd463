// A request to stop the run at the next step boundary, and what the run did about it.
//
// launch/stop_signals.h's SIGINT / SIGTERM handler calls request_stop() (async-signal-safe: one
// lock-free atomic store); the trainer reads stop_signal() once per step — one process at the
// step's end, several ranks folded into the step's one inf/NaN max-reduction, so every rank stops
// after the same step (runtime/train/train_step.h, combine). A run that stopped before its last
// step records where (record_stop), for launch/'s closing line and exit code (docs/launch.md
// "Stopping a run").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace st::runtime {

// The first request's signal is kept (a later one does not replace it). Async-signal-safe.
void request_stop(int signal) noexcept;
int stop_signal() noexcept;  // 0: none requested
void clear_stop_request() noexcept;  // tests; also forgets the record

struct StopRecord {
  int signal = 0;          // agreed over the ranks (their largest signal number)
  int64_t step = 0;        // the last step run (the checkpoint's step when one was saved)
  int64_t steps = 0;       // the run's --steps
  std::string checkpoint;  // the newest complete checkpoint after the stop ("" none; rank 0's view)
  bool saved = false;      // the stop itself saved it (--save-on-signal 1) or a due save fell on its step
};
void record_stop(const StopRecord& r);
std::optional<StopRecord> recorded_stop();

// Whether a stop request can still be honoured: the trainer's step loop runs (set around it).
// Outside it (start-up, the end) launch/'s handler ends the process at once: nothing to save yet,
// or nothing left. Async-signal-safe to read.
void set_stop_armed(bool armed) noexcept;
bool stop_armed() noexcept;

// How long a stop may take, in whole seconds, before the process ends without a step boundary (a
// rank stuck in a collective with a lost peer never reaches one): launch/'s handler arms alarm()
// with it at the first signal. The trainer sets it from its longest step with that step's
// boundary work (validation, a save): 10 s + 3 of those; 30 s until the first step. Async-signal-safe to read.
void set_stop_grace(int seconds) noexcept;
int stop_grace() noexcept;

// "SIGINT", "SIGTERM", else "signal N".
std::string signal_name(int signal);

}  // namespace st::runtime
