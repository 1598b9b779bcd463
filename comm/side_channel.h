// SideChannel: names the rank a timed-out operation waited for. Each communicator (both backends)
// owns one: a private duplicate of the group's MPI communicator that carries nothing but these
// questions and answers, so they never match the group's own traffic.
//
// When a Work's deadline passes, explain_timeout() asks the ranks the operation needs (every
// other rank for a collective, the batch's peers for point to point) what they have issued on
// this communicator, and waits for the answers within min(5 s, timeout) — answering the others'
// questions meanwhile (until the window ends, or every peer both answered and asked: a peer whose
// deadline passes a moment later must still find this rank answering). A rank answers while it
// polls in any comm wait of the process (every SideChannel is a poll hook, comm/poll_hooks.h): that is,
// when it is alive and blocked in comm, whichever communicator it waits on. A rank that is
// computing, stopped (SIGSTOP) or dead does not answer, and is named as such. The answer is what
// the rank has issued (collectives; sends to and receives from the asker) and what it is waiting
// in now ("barrier seq 4 in group 'tp[pp=0,dp=1]'"), so the line reads e.g. (one line each)
//   comm timeout: rank 2 did not reach allreduce seq 10 in group 'dp' [ranks 0,2] within 3.0 s
//     (last seen at seq 9; waiting in recv seq 3 in group 'pp')
//   comm timeout: rank 2 did not reach allreduce seq 10 in group 'dp' [ranks 0,2] within 3.0 s
//     (no answer on the side channel within 3.0 s: busy outside comm, stopped or dead)
// The collective line does not depend on who reports it: every alive rank that timed out prints
// the same one (as long as the missing rank stays missing for the window). Ranks in these lines
// are world ranks (MPI_COMM_WORLD), and [ranks ...] lists the group's members.
//
// The same channel carries a second kind of question, asked only on the world's side channel by
// the deadline diagnosis (comm/deadline_gather.h): "send me your report" — every communicator's
// progress and flight recorder ring, and what this rank waits on (comm/flight_report.h). Any side
// channel answers it, with the whole process's report.
//
// Cost per operation: a counter (point to point: the per-peer counts of the batch); while waiting,
// two MPI_Improbe per communicator per millisecond; after a timeout, at most min(5 s, timeout).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_state.h"
#include "comm/poll_hooks.h"

namespace st::comm {

class SideChannel final : public PollHook, public TimeoutExplainer {
 public:
  // Collective over `comm` (MPI_Comm_idup within `timeout`); registered as a poll hook. `state` is
  // the communicator's (what the answers report); held weakly. Sets state's world ranks.
  static std::shared_ptr<SideChannel> create(MPI_Comm comm, const std::shared_ptr<CommState>& state, Millis timeout);
  ~SideChannel() override;
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;

  // Answers every question that arrived; never blocks, never throws (a failure disables it).
  void on_poll() override;
  // The TimeoutError line for operation `op` `seq`, which waited `waited` for `awaited`; asks the
  // peers within window(waited). Throws CommError when the side channel failed.
  std::string explain_timeout(const std::string& op, uint64_t seq, const Awaited& awaited, Millis waited) override;
  // How long explain_timeout waits for answers: min(5 s, timeout).
  static Millis window(Millis timeout);
  // World rank of each group rank.
  const std::vector<int>& world_ranks() const { return world_; }
  // The report questions and answers (comm/deadline_gather.h): a question is one int64, the
  // asker's round; an answer is that round followed by the encoded report.
  static constexpr int kReportQuestion = 3;
  static constexpr int kReportAnswer = 4;
  MPI_Comm comm() const { return comm_; }
  // Questions were sent on this channel: late answers may still come, so its MPI_Comm is kept.
  void keep_comm() { asked_ = true; }

 private:
  struct InFlight {
    MPI_Request req;
    std::shared_ptr<void> buffer;  // what the request reads or writes
  };
  struct Ask;  // one question to a peer and its answer
  SideChannel(MPI_Comm comm, std::weak_ptr<CommState> state, std::vector<int> world);
  // Posts the questions and polls for the answers until all came or `window` passed.
  void ask_and_wait(std::vector<Ask>& asks, int64_t round, Millis window);
  void serve();
  void answer_report(int asker, int64_t round);
  void reap();  // drops completed requests of earlier rounds
  std::string where() const;
  MPI_Comm comm_;
  std::weak_ptr<CommState> state_;
  std::vector<int> world_;
  int64_t round_ = 0;  // this rank's questions; answers echo it (late answers are told apart)
  std::vector<InFlight> in_flight_;
  std::vector<char> asked_by_;  // per group rank: it asked this rank a question
  bool asked_ = false;  // peers may still answer: the MPI_Comm is never freed
  bool failed_ = false;
  std::string failure_;
};

// "0-3,8,10" for world ranks {0,1,2,3,8,10}.
std::string rank_list(std::vector<int> ranks);

}  // namespace st::comm
