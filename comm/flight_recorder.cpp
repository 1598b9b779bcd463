// The flight recorder's ring and its seqlock slots (see flight_recorder.h).
#include "comm/flight_recorder.h"

#include <chrono>

namespace st::comm {
namespace {

// FlightEntry as words, in this order.
enum Word { kId, kSeq, kOp, kPeer, kDtype, kArg, kRoot, kCount, kBytes, kTag, kEnqueued, kStarted, kCompleted };

}  // namespace

const char* flight_op_name(FlightOp op) {
  switch (op) {
    case FlightOp::allreduce: return "allreduce";
    case FlightOp::reduce_scatter: return "reduce_scatter";
    case FlightOp::all_gather: return "all_gather";
    case FlightOp::broadcast: return "broadcast";
    case FlightOp::barrier: return "barrier";
    case FlightOp::split: return "split";
    case FlightOp::reduce: return "reduce";
    case FlightOp::send: return "send";
    case FlightOp::recv: return "recv";
  }
  return "?";
}

int64_t flight_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity), slots_(new Slot[capacity > 0 ? capacity : 1]) {
  for (size_t i = 0; i < capacity_; ++i)
    for (auto& w : slots_[i].f) w.store(-1, std::memory_order_relaxed);  // id -1: never written
}

void FlightRecorder::write(Slot& s, const int64_t* words) {
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (int i = 0; i < kFields; ++i) s.f[i].store(words[i], std::memory_order_relaxed);
  s.version.store(v + 2, std::memory_order_release);
}

uint64_t FlightRecorder::record(const FlightEntry& e) {
  const uint64_t id = next_.load(std::memory_order_relaxed);
  next_.store(id + 1, std::memory_order_relaxed);  // one writer
  if (capacity_ == 0) return id;
  const int64_t words[kFields] = {static_cast<int64_t>(id), static_cast<int64_t>(e.seq), static_cast<int64_t>(e.op),
                                  e.peer, e.dtype, e.arg, e.root, e.count, e.bytes, e.tag,
                                  e.enqueued_ns ? e.enqueued_ns : flight_now_ns(), e.started_ns, e.completed_ns};
  write(slots_[id % capacity_], words);
  return id;
}

void FlightRecorder::mark(uint64_t first, uint32_t n, int field, int64_t ns) {
  if (capacity_ == 0) return;
  for (uint64_t id = first; id < first + n; ++id) {
    Slot& s = slots_[id % capacity_];
    if (s.f[kId].load(std::memory_order_relaxed) != static_cast<int64_t>(id)) continue;  // overwritten
    if (s.f[field].load(std::memory_order_relaxed) != 0) continue;
    const uint64_t v = s.version.load(std::memory_order_relaxed);
    s.version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.f[field].store(ns, std::memory_order_relaxed);
    s.version.store(v + 2, std::memory_order_release);
  }
}

void FlightRecorder::mark_started(uint64_t first, uint32_t n, int64_t ns) { mark(first, n, kStarted, ns); }
void FlightRecorder::mark_completed(uint64_t first, uint32_t n, int64_t ns) { mark(first, n, kCompleted, ns); }

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  if (capacity_ == 0) return out;
  const uint64_t end = next_.load(std::memory_order_acquire);
  const uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  out.reserve(static_cast<size_t>(end - begin));
  for (uint64_t id = begin; id < end; ++id) {
    const Slot& s = slots_[id % capacity_];
    int64_t w[kFields];
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;  // being written
    for (int i = 0; i < kFields; ++i) w[i] = s.f[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) != v1 || w[kId] != static_cast<int64_t>(id)) continue;
    FlightEntry e;
    e.id = id;
    e.seq = static_cast<uint64_t>(w[kSeq]);
    e.op = static_cast<FlightOp>(w[kOp]);
    e.peer = static_cast<int32_t>(w[kPeer]);
    e.dtype = static_cast<int32_t>(w[kDtype]);
    e.arg = static_cast<int32_t>(w[kArg]);
    e.root = static_cast<int32_t>(w[kRoot]);
    e.count = w[kCount];
    e.bytes = w[kBytes];
    e.tag = w[kTag];
    e.enqueued_ns = w[kEnqueued];
    e.started_ns = w[kStarted];
    e.completed_ns = w[kCompleted];
    out.push_back(e);
  }
  return out;
}

}  // namespace st::comm
