// StateReaderScope and wait_for_state_readers on CUDA (see tensor/state_readers.h): one side
// stream and two events per device, made at first use (the trainer's first step waits eagerly,
// before any graph capture, so the capture finds them made and recorded).
#include "tensor/state_readers.h"

#include <map>
#include <mutex>

#include "tensor/cuda/runtime.h"
#include "tensor/storage.h"

namespace st::cuda {
namespace {

struct Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // the current stream's point the scope starts after
  cudaEvent_t done = nullptr;   // the scope's end: what the state's next writer waits for
};

Side& side_of(int device) {
  static std::mutex mu;
  static std::map<int, Side>* sides = new std::map<int, Side>;  // never destroyed: in use until exit
  std::lock_guard<std::mutex> lock(mu);
  Side& s = (*sides)[device];
  if (!s.stream) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventRecord(s.done, s.stream));  // recorded once: a wait before any scope passes
  }
  return s;
}

}  // namespace

StateReaderScope::StateReaderScope() {
  if (!available()) return;
  Side& s = side_of(current_device());
  cudaStream_t cur = current_stream();
  CHECK_CUDA(cudaEventRecord(s.ready, cur));
  CHECK_CUDA(cudaStreamWaitEvent(s.stream, s.ready, 0));
  prev_ = cur;
  set_current_stream(s.stream);
  active_ = true;
}

StateReaderScope::~StateReaderScope() {
  if (!active_) return;
  Side& s = side_of(current_device());
  cudaEventRecord(s.done, s.stream);  // no throw from a destructor; an error resurfaces at the next CUDA call
  set_current_stream(static_cast<cudaStream_t>(prev_));
}

void wait_for_state_readers() {
  if (!available()) return;
  Side& s = side_of(current_device());
  cudaStream_t cur = current_stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK_CUDA(cudaStreamIsCapturing(cur, &status));
  // captured: an external event wait node — each replay waits for the event's latest record (the
  // last save's pack), not for the one the capture saw
  CHECK_CUDA(cudaStreamWaitEvent(cur, s.done, status == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : 0));
}

}  // namespace st::cuda
