// Work: the handle every communicator call returns (PyTorch c10d's Work).
//
// wait() polls the backend (MPI_Testall, or cudaEventQuery + ncclCommGetAsyncError) until the
// operation finishes or its deadline passes; it never blocks inside MPI or NCCL. On expiry the
// communicator is marked broken (its abort hook runs: ncclCommAbort for NCCL) and wait() throws
// st::TimeoutError with a one-line cause naming rank, group, op and sequence number. Once broken,
// every later call on the communicator and every other pending Work throws CommError at once.
//
// While it polls, wait() also runs the process's poll hooks (comm/poll_hooks.h): the side channels
// answer peers that ask what this rank has reached, and the MPI backend's queues post what they
// hold. When the deadline passes, the communicator's TimeoutExplainer (its side channel) names the
// rank(s) that never arrived, and where the communicator descends from make_communicator's world,
// the world's DeadlineDiagnoser gathers every rank's flight recorder and throws DeadlineError (a
// TimeoutError) with one diagnosis for the job (comm/deadline_gather.h). Both only see the
// interfaces of comm/comm_state.h.
//
// The flight recorder (comm/flight_recorder.h): Communicator records each operation when it is
// issued; the Work marks it started once the backend has it (started()) and completed when a poll
// first sees it finished.
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
// instead (comm/keep_alive.h): MPI cannot cancel a collective, so the memory must outlive the
// request.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/awaited.h"
#include "comm/comm_state.h"

namespace st::comm {

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
  // True once the backend has the operation (posted to MPI, enqueued on NCCL's stream).
  virtual bool started() const { return true; }

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
  friend class Communicator;  // sets awaited_ and the flight recorder's entries
  bool poll_and_finish();
  void record_progress(bool finished);  // the flight recorder's started / completed times
  std::string timeout_line(Millis timeout) const;
  std::shared_ptr<CommState> state_;
  std::string op_;
  uint64_t seq_;
  bool done_ = false;
  bool abandoned_ = false;
  Awaited awaited_;
  uint64_t flight_first_ = 0;  // the recorder's entries of this operation: [first, first + n)
  uint32_t flight_n_ = 0;
  bool flight_started_ = false;
};

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
  bool started() const override;

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
