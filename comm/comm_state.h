// CommState: the part of a communicator that its Works, its side channel and the diagnosis
// share — identity (rank, size, name, the members' world ranks), timeout, the broken flag and
// abort hook, what this rank has issued (Progress), its flight recorder, and the two objects a
// deadline calls: the group's TimeoutExplainer (comm/side_channel.h: names the peer a timed-out
// operation waited for) and the world's DeadlineDiagnoser (comm/deadline_gather.h: every rank's
// rings, one diagnosis). Work (comm/work.h) only sees these interfaces, so the objects that
// implement them may depend on Work's lower parts without a cycle.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/awaited.h"
#include "comm/flight_recorder.h"

namespace st::comm {

using Millis = std::chrono::milliseconds;
// Passed to Work::wait: use the communicator's timeout.
inline constexpr Millis kCommTimeout{-1};

// Names who a timed-out operation waited for (the TimeoutError's line).
class TimeoutExplainer {
 public:
  virtual ~TimeoutExplainer() = default;
  // The line for operation `op` `seq`, which waited `waited` for `awaited`; throws CommError when
  // it cannot ask.
  virtual std::string explain_timeout(const std::string& op, uint64_t seq, const Awaited& awaited, Millis waited) = 0;
};

// Diagnoses a deadline from every rank's flight recorder (comm/deadline_gather.h).
class DeadlineDiagnoser {
 public:
  virtual ~DeadlineDiagnoser() = default;
  // Right after a deadline passed, before the operation's own line is made: asks every rank of
  // the world for its report; returns at once.
  virtual void begin(Millis timeout) = 0;
  // Collects the answers (within the window that began at begin), diagnoses, writes the dump
  // when one was asked for, and throws DeadlineError (a TimeoutError) carrying `line` and the
  // diagnosis.
  [[noreturn]] virtual void conclude(const std::string& line) = 0;
};

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

  // World rank (MPI_COMM_WORLD) of each group rank; set with the side channel (empty before).
  const std::vector<int>& world_ranks() const { return world_; }
  void set_world_ranks(std::vector<int> w) { world_ = std::move(w); }

  // What this rank has issued on the communicator: what the side channel answers a peer that
  // asks (and how "last seen at seq 9" is known). Updated by Communicator.
  struct Progress {
    uint64_t collectives = 0;          // collectives issued; the next one gets this seq
    uint64_t p2p = 0;                  // batch_p2p calls issued; the next one gets this seq
    std::vector<uint64_t> sends_to;    // per group rank: sends issued to it (size() entries)
    std::vector<uint64_t> recvs_from;  // per group rank: receives issued from it
  };
  Progress& progress() { return progress_; }
  const Progress& progress() const { return progress_; }

  // The ring of this communicator's last operations (null: none kept).
  const std::shared_ptr<FlightRecorder>& recorder() const { return recorder_; }
  void set_recorder(std::shared_ptr<FlightRecorder> r) { recorder_ = std::move(r); }
  // Set by the backend once the communicator's side channel exists (none: timeouts are not explained).
  void set_explainer(std::shared_ptr<TimeoutExplainer> e) { explainer_ = std::move(e); }
  const std::shared_ptr<TimeoutExplainer>& explainer() const { return explainer_; }
  // The world's diagnoser, shared by the world communicator and every group split from it.
  void set_diagnoser(std::shared_ptr<DeadlineDiagnoser> d) { diagnoser_ = std::move(d); }
  const std::shared_ptr<DeadlineDiagnoser>& diagnoser() const { return diagnoser_; }

 private:
  int rank_;
  int size_;
  std::string name_;
  std::vector<int> world_;
  std::atomic<int64_t> timeout_ms_{0};
  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::function<void()> abort_hook_;
  Progress progress_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<TimeoutExplainer> explainer_;
  std::shared_ptr<DeadlineDiagnoser> diagnoser_;
};

// Every communicator of the process registers its state (held weakly), so that a rank's report
// holds the rings of all its groups (comm/flight_report.h). Creation only, never per operation.
void register_comm_state(const std::shared_ptr<CommState>& state);
// The states still alive, in creation order.
std::vector<std::shared_ptr<CommState>> live_comm_states();

}  // namespace st::comm
