// FlightRecorder: a communicator's ring of its last N operations (collectives and point-to-point
// transfers): sequence number, op, peer, dtype, element count, bytes, tag, and the steady-clock
// times it was enqueued (issued by the caller), started (handed to MPI / NCCL) and completed (seen
// complete by a poll). On a deadline every reachable rank reports its rings (comm/flight_report.h)
// and the world's diagnoser compares them (comm/deadline_diagnosis.h).
//
// Cost: the ring is allocated once, when the communicator is created; recording an operation
// writes one slot (a steady_clock read and a dozen relaxed atomic stores), marking it started or
// completed one field — no allocation, no lock. The communicator's thread is the only writer
// (one thread per communicator); a reader (the side channel answering a peer, a dump) may run on
// another thread: each slot is a seqlock (a version that is odd while the slot is written), so a
// reader copies a slot whole or skips it, and never blocks the writer.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace st::comm {

// What an entry records. The collectives' values are CollectiveKind's (communicator.h).
enum class FlightOp : int32_t {
  allreduce = 1, reduce_scatter, all_gather, broadcast, barrier, split, reduce, send, recv
};
const char* flight_op_name(FlightOp op);
inline bool is_p2p(FlightOp op) { return op == FlightOp::send || op == FlightOp::recv; }

struct FlightEntry {
  uint64_t id = 0;   // the recorder's running number of the entry (0, 1, 2, ...)
  uint64_t seq = 0;  // the collective's seq, or the batch_p2p call's seq (its transfers share it)
  FlightOp op = FlightOp::allreduce;
  int32_t peer = -1;   // point to point: the peer's group rank; else -1
  int32_t dtype = 0;   // DType value
  int32_t arg = -1;    // the reduce op (ReduceOp) of a reduction; else -1
  int32_t root = -1;   // broadcast and reduce; else -1
  int64_t count = 0;   // elements (per rank, as the collective's signature counts them)
  int64_t bytes = 0;   // count x the dtype's size
  int64_t tag = -1;    // the caller's tag (collectives; -1: none) or the transfer's tag
  int64_t enqueued_ns = 0, started_ns = 0, completed_ns = 0;  // steady clock; 0: not yet
  // The part the ranks of a group must agree on for a collective: op, dtype, count, reduce op, root, tag.
  bool same_signature(const FlightEntry& o) const {
    return op == o.op && dtype == o.dtype && count == o.count && arg == o.arg && root == o.root && tag == o.tag;
  }
};

// Steady-clock nanoseconds, the recorder's clock.
int64_t flight_now_ns();

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return capacity_; }
  // Records `e` (its id is assigned here; enqueued_ns = now unless set) and returns the id.
  uint64_t record(const FlightEntry& e);
  // Marks entries [first, first + n) started / completed at `ns`, those still in the ring (an
  // entry overwritten meanwhile is left alone); a time already set is kept.
  void mark_started(uint64_t first, uint32_t n, int64_t ns);
  void mark_completed(uint64_t first, uint32_t n, int64_t ns);
  // The entries in the ring, oldest first (a slot being written at that moment is left out).
  std::vector<FlightEntry> snapshot() const;
  uint64_t recorded() const { return next_.load(std::memory_order_relaxed); }  // ever recorded

 private:
  static constexpr int kFields = 13;  // FlightEntry as int64 words
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd while written
    std::atomic<int64_t> f[kFields];
  };
  void write(Slot& s, const int64_t* words);
  void mark(uint64_t first, uint32_t n, int field, int64_t ns);
  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace st::comm
