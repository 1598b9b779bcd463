// EventPool (see event_pool.h): a free list behind a mutex.
#include "comm/nccl/event_pool.h"

#include "tensor/cuda/runtime.h"

namespace st::comm {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);  // errors ignored: may run at process exit
}

cudaEvent_t EventPool::get() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void EventPool::put(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

}  // namespace st::comm
