// What this thread is waiting for in comm now, and what this process last timed out in: what the
// side channel answers a peer that asks (comm/side_channel.h: "allreduce seq 3 in group 'dp'") and
// what a rank's report says it waits on (comm/flight_report.h). Work::wait and mpi_wait_deadline
// set it for their duration (WaitingScope); a deadline records the operation that timed out, which
// a rank keeps reporting while it waits for the job to end.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/awaited.h"
#include "comm/comm_state.h"

namespace st::comm {

struct WaitSnapshot {
  enum class State : int32_t { none = 0, waiting = 1, timed_out = 2 };
  State state = State::none;
  std::string group;         // the communicator's name; "" for a wait without a Work (text)
  std::vector<int> members;  // its world ranks, by group rank
  int rank = 0;              // this rank's group rank
  std::string op;
  uint64_t seq = 0;
  bool collective = false;
  struct Peer {
    int world_rank = 0;
    uint64_t send_index = 0;  // as Awaited::Transfer, the peer's world rank instead of its group rank
    uint64_t recv_index = 0;
  };
  std::vector<Peer> peers;  // point to point
  std::string text;         // a wait without a Work (creation, split, the debug exchange)
  // "allreduce seq 3 in group 'dp'", the text, or "" when not waiting.
  std::string describe() const;
};

class WaitingScope {
 public:
  // A Work's wait: operation `op` `seq` of the communicator `state`, waiting for `awaited`. The
  // arguments must outlive the scope.
  WaitingScope(const CommState& state, const std::string& op, uint64_t seq, const Awaited& awaited);
  // A wait without a Work, e.g. "creating communicator 'dp' (MPI_Comm_idup)".
  explicit WaitingScope(const std::string* what);
  ~WaitingScope();
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;
  // What this thread waits in now, "" when it is not waiting in comm.
  static std::string current();
  // This thread's wait; when it is not waiting, the operation this process last timed out in
  // (state timed_out); else state none.
  static WaitSnapshot snapshot();

  // One wait as the thread holds it (pointers into the waiting caller's frame).
  struct Frame {
    const CommState* state = nullptr;
    const std::string* op = nullptr;
    uint64_t seq = 0;
    const Awaited* awaited = nullptr;
    const std::string* what = nullptr;
  };

 private:
  Frame prev_;  // the enclosing wait (a Work's destructor may wait inside another wait)
};

// Records that operation `op` `seq` of `state` passed its deadline waiting for `awaited`.
void note_timed_out(const CommState& state, const std::string& op, uint64_t seq, const Awaited& awaited);

}  // namespace st::comm
