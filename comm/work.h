// Work: the handle every communicator call returns (PyTorch c10d's Work), and CommState, the
// part of a communicator that its Works share (identity, timeout, broken flag, abort hook).
//
// wait() polls the backend (MPI_Testall, or cudaEventQuery + ncclCommGetAsyncError) until the
// operation finishes or its deadline passes; it never blocks inside MPI or NCCL. On expiry the
// communicator is marked broken (its abort hook runs: ncclCommAbort for NCCL) and wait() throws
// st::TimeoutError with a one-line cause naming rank, group, op and sequence number. Once broken,
// every later call on the communicator and every other pending Work throws CommError at once.
//
// While it polls, wait() also runs the process's poll hooks (run_poll_hooks): the side channels
// answer peers that ask what this rank has reached (comm/side_channel.h), and strict-mode p2p
// queues post their next batch. When the deadline passes, the communicator's side channel names
// the rank(s) that never arrived before the TimeoutError is thrown.
//
// wait_on_stream() is the device-side wait: later work on the caller's current CUDA stream runs
// after the operation, and the host goes on at once where the backend can do that (NCCL: the
// stream waits for the completion event); elsewhere it is wait(). The host still has to see the
// operation complete — wait() or is_completed() later, or the destructor — and that is where
// errors and the deadline are reported.
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
#include <vector>

namespace st::comm {

class SideChannel;

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

  // What this rank has issued on the communicator: what the side channel answers a peer that
  // asks (and how "last seen at seq 9" is known). Updated by Communicator.
  struct Progress {
    uint64_t collectives = 0;          // collectives issued; the next one gets this seq
    std::vector<uint64_t> sends_to;    // per group rank: sends issued to it (size() entries)
    std::vector<uint64_t> recvs_from;  // per group rank: receives issued from it
  };
  Progress& progress() { return progress_; }
  const Progress& progress() const { return progress_; }
  // Set by the backend once the communicator's side channel exists (none: timeouts are not diagnosed).
  void set_side_channel(std::shared_ptr<SideChannel> s) { side_ = std::move(s); }
  const std::shared_ptr<SideChannel>& side_channel() const { return side_; }

 private:
  int rank_;
  int size_;
  std::string name_;
  std::atomic<int64_t> timeout_ms_{0};
  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::function<void()> abort_hook_;
  Progress progress_;
  std::shared_ptr<SideChannel> side_;
};

// What a Work waits for, for the timeout diagnosis; set by Communicator when it returns the Work.
struct Awaited {
  bool collective = false;
  // Point to point: per peer (group rank), the 1-based index — counted per direction over the
  // communicator's life — of this Work's last send to and last receive from it (0: none).
  struct Transfer {
    int peer = 0;
    uint64_t send_index = 0;
    uint64_t recv_index = 0;
  };
  std::vector<Transfer> transfers;
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
  // Returns at once, and whatever is enqueued afterwards on st::cuda::current_stream() runs after
  // the operation (NCCL: cudaStreamWaitEvent on its completion event). Backends without a
  // device-side wait (MPI: CPU tensors, pinned staging, CUDA-aware) do wait() instead. Errors and
  // the deadline surface at the next wait() or is_completed() (the Work must be kept until then:
  // dropping it waits on the host). On a completed Work it returns at once.
  void wait_on_stream();
  const std::string& op() const { return op_; }
  uint64_t seq() const { return seq_; }
  // "rank 1 of 4 in group 'world', op allreduce, seq 7"
  std::string describe() const;
  const Awaited& awaited() const { return awaited_; }
  const std::shared_ptr<CommState>& comm_state() const { return state_; }
  // Backend detail for the timeout line ("" when none), e.g. a strict-mode batch still queued.
  virtual std::string pending_note() const { return ""; }

 protected:
  // True once the backend finished; may throw CommError for backend errors.
  virtual bool poll() = 0;
  // Runs once after poll() first returned true: unstaging, avg scaling, stream ordering.
  virtual void finish() {}
  // Makes the current stream wait for the operation on the device and returns true; false when
  // the backend cannot (wait_on_stream then waits on the host).
  virtual bool stream_wait() { return false; }
  // The operation will never be waited for again (timeout, broken communicator): keep buffers
  // alive for as long as the backend might touch them.
  virtual void abandon() {}
  const std::shared_ptr<CommState>& state() const { return state_; }
  // For destructors of derived Works (virtual calls are gone in ~Work): waits for an unfinished
  // operation within its deadline, or abandons it if the communicator broke; never throws.
  void settle() noexcept;

 private:
  friend class Communicator;  // sets awaited_
  bool poll_and_finish();
  std::string timeout_line(Millis timeout) const;
  std::shared_ptr<CommState> state_;
  std::string op_;
  uint64_t seq_;
  bool done_ = false;
  bool abandoned_ = false;
  Awaited awaited_;
};

// Work that must go on while any wait of this process polls, whichever communicator it is on: the
// side channels' answers, the strict-mode p2p queues. Hooks are held weakly and never throw.
class PollHook {
 public:
  virtual ~PollHook() = default;
  virtual void on_poll() = 0;
};
void register_poll_hook(std::weak_ptr<PollHook> hook);
// Runs every live hook, at most once a millisecond unless `force` (expired ones are dropped).
void run_poll_hooks(bool force = false);

// What this thread is waiting for now, as the side channel reports it to a peer that asks
// ("allreduce seq 3 in group 'dp'"). Set by Work::wait and mpi_wait_deadline for their duration.
class WaitingScope {
 public:
  explicit WaitingScope(const Work* w);
  explicit WaitingScope(const std::string* what);
  ~WaitingScope();
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;
  // "" when this thread is not waiting in comm.
  static std::string current();

 private:
  const Work* prev_work_;
  const std::string* prev_what_;
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

// One operation issued as several backend calls (comm splits operations above max_count()):
// complete once every part is; wait_on_stream() makes the stream wait for every part.
class WorkGroup final : public Work {
 public:
  WorkGroup(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::vector<std::shared_ptr<Work>> parts);
  ~WorkGroup() override { settle(); }
  std::string pending_note() const override;

 protected:
  bool poll() override;
  bool stream_wait() override;
  void finish() override { parts_.clear(); }
  // The parts settle themselves: their communicator is broken, so they keep their buffers.
  void abandon() override {}

 private:
  std::vector<std::shared_ptr<Work>> parts_;
};

}  // namespace st::comm
