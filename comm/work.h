// Work: the handle every communicator call returns (PyTorch c10d's Work), and CommState, the
// part of a communicator that its Works share (identity, timeout, broken flag, abort hook).
//
// wait() polls the backend (MPI_Testall, or cudaEventQuery + ncclCommGetAsyncError) until the
// operation finishes or its deadline passes; it never blocks inside MPI or NCCL. On expiry the
// communicator is marked broken (its abort hook runs: ncclCommAbort for NCCL) and wait() throws
// st::TimeoutError with a one-line cause naming rank, group, op and sequence number. Once broken,
// every later call on the communicator and every other pending Work throws CommError at once.
//
// A Work dropped before it completed waits for it in its destructor (within the deadline, errors
// reported on stderr), because the backend may still write into the tensors it holds. A Work
// abandoned because its communicator broke hands its buffers to a process-wide keep-alive list
// instead: MPI cannot cancel a collective, so the memory must outlive the request.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace st::comm {

using Millis = std::chrono::milliseconds;
// Passed to Work::wait: use the communicator's timeout.
inline constexpr Millis kCommTimeout{-1};

class CommState {
 public:
  CommState(int rank, int size, std::string name, Millis timeout) : rank_(rank), size_(size), name_(std::move(name)) {
    set_timeout(timeout);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  Millis timeout() const { return Millis(timeout_ms_.load()); }
  void set_timeout(Millis t);

  bool broken() const { return broken_.load(); }
  std::string broken_reason() const;
  // First call wins: records the reason and runs the abort hook (once).
  void mark_broken(const std::string& reason);
  void set_abort_hook(std::function<void()> hook) { abort_hook_ = std::move(hook); }

  // "rank 1 of 4 in group 'world'"
  std::string where() const;

 private:
  int rank_;
  int size_;
  std::string name_;
  std::atomic<int64_t> timeout_ms_{0};
  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::function<void()> abort_hook_;
};

class Work {
 public:
  Work(std::shared_ptr<CommState> state, std::string op, uint64_t seq);
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks (polling) until the operation completes; `timeout` defaults to the communicator's.
  // Throws TimeoutError after the deadline, CommError if the communicator broke or the backend
  // reported an error. A completed Work returns at once, every time.
  void wait(Millis timeout = kCommTimeout);
  // One poll: true once the operation finished (its results are then in place).
  bool is_completed();
  const std::string& op() const { return op_; }
  uint64_t seq() const { return seq_; }
  // "rank 1 of 4 in group 'world', op allreduce, seq 7"
  std::string describe() const;

 protected:
  // True once the backend finished; may throw CommError for backend errors.
  virtual bool poll() = 0;
  // Runs once after poll() first returned true: unstaging, avg scaling, stream ordering.
  virtual void finish() {}
  // The operation will never be waited for again (timeout, broken communicator): keep buffers
  // alive for as long as the backend might touch them.
  virtual void abandon() {}
  const std::shared_ptr<CommState>& state() const { return state_; }
  // For destructors of derived Works (virtual calls are gone in ~Work): waits for an unfinished
  // operation within its deadline, or abandons it if the communicator broke; never throws.
  void settle() noexcept;

 private:
  bool poll_and_finish();
  std::shared_ptr<CommState> state_;
  std::string op_;
  uint64_t seq_;
  bool done_ = false;
  bool abandoned_ = false;
};

// Keeps `buffers` alive until the process ends (see abandon()).
void keep_alive_forever(std::shared_ptr<void> buffers);

// A Work that is complete when created (empty groups, size-1 shortcuts).
class CompletedWork final : public Work {
 public:
  using Work::Work;

 protected:
  bool poll() override { return true; }
};

}  // namespace st::comm
