// EventPool: the completion events of one NCCL communicator's operations, reused instead of
// created and destroyed per call (cudaEventCreate + cudaEventDestroy cost microseconds, as much
// as a small collective). An event goes back to the pool only once nothing can observe its last
// record any more: the host saw it complete (cudaEventQuery) and its Work finished. An event of an
// operation that never finished (timeout, broken communicator) is destroyed, never reused.
// Shared by the communicator and its Works (a Work may outlive the communicator); thread-safe.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace st::comm {

class EventPool {
 public:
  EventPool() = default;
  ~EventPool();  // destroys the free events
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free event, or a new one (cudaEventDisableTiming) on the current device.
  cudaEvent_t get();
  // Returns `e` (see above for when that is allowed).
  void put(cudaEvent_t e);

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace st::comm
