// Device work that reads the training state beside the next step (an asynchronous save's pack of
// weights and optimizer moments, runtime/parallel/state_sharding.h HostStaging::flush): inside a
// StateReaderScope the current stream is a side stream that starts after everything the current
// stream had queued (the step that made the values), so the scope's kernels run beside the work
// queued after it; the next step, before it first writes that state (the optimizer), calls
// wait_for_state_readers(): a device-side wait for the last scope's end — inside a captured CUDA
// graph too, as an external event wait node, which waits for the event's latest record when the
// replay reaches it. The event is recorded once when made, so a wait before any scope waits for
// nothing. Included by code compiled in every build (no CUDA headers); without a CUDA device both
// are no-ops (nothing runs beside anything).
#pragma once

namespace st::cuda {

class StateReaderScope {
 public:
  StateReaderScope();   // the side stream waits for the current one, and becomes current
  ~StateReaderScope();  // records the scope's end (what wait_for_state_readers waits for); restores
  StateReaderScope(const StateReaderScope&) = delete;
  StateReaderScope& operator=(const StateReaderScope&) = delete;

 private:
  void* prev_ = nullptr;  // cudaStream_t current before the scope
  bool active_ = false;
};

// The current stream waits (on the device; the host goes on) for the work of the last
// StateReaderScope on this device. Call it before the step writes what a scope may read.
void wait_for_state_readers();

}  // namespace st::cuda
