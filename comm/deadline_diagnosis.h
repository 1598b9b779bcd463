// The diagnosis of a deadline from every reachable rank's report (comm/flight_report.h): which
// rank is behind, where each rank waits, and the first operation at which the ranks diverge — one
// line, computed by any rank that holds the reports (a pure function: tested without ranks).
//
// Who is behind. Every answering rank waits on something: a collective of a group (then on the
// members that have not issued it, or did not answer; a member that issued it but waits elsewhere
// is followed too) or a batch of transfers (then on each peer that has not issued the matching
// send / receive, did not answer, or issued them but waits elsewhere). These edges form a wait
// graph; following them from every waiting rank ends at the ranks that wait on nobody. A rank
// that gave no answer (SIGSTOPped, dead, or busy outside comm for the whole window) is such an
// end, and is named — a rank that waits on a p2p from it is never the culprit, however its own
// deadline line reads. When every rank answered (they wait on each other in a cycle: a skipped or
// reordered collective), the rank named is the one whose collectives differ from the others'
// at the first diverging sequence number, else the fewest ranks that have not issued what the
// others wait in (the lowest last sequence number in the stuck group).
//
// First divergence. Per group, the collectives of the members' rings compared by sequence number
// (op, dtype, count, reduce op, root, caller tag) over the range every ring still holds: the first
// seq where they differ, with each side's ranks. Without one: two groups whose collectives were
// issued in different orders (rank a waits in G's seq s, which rank b has not issued, while b waits
// in H's seq t, which a has not issued).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_state.h"
#include "comm/flight_report.h"
#include "tensor/error.h"

namespace st::comm {

struct Diagnosis {
  std::string line;         // "comm deadline: rank 2 is behind ...", one line
  std::vector<int> behind;  // world ranks named as behind
  std::string divergence;   // the first diverging operation, "" when none was found
};

// `reports[r]`: world rank r's report, nullopt when it did not answer within `window`.
Diagnosis diagnose(const std::vector<std::optional<RankReport>>& reports, Millis window);

// The TimeoutError of an operation whose communicator descends from a world with a diagnoser
// (comm/deadline_gather.h). what() is the diagnosis's line; the operation's own line (as a plain
// TimeoutError would carry it) is timeout_line(). reporter() is the world rank that prints the
// job's one diagnosis: the lowest rank that answered (or this one); the others keep answering
// their peers (run_poll_hooks_for, comm/poll_hooks.h) until the job ends. It holds the world's
// side channel and every communicator state alive, so the answers can go on after the
// communicators themselves are gone.
class DeadlineError : public TimeoutError {
 public:
  DeadlineError(std::string timeout_line, Diagnosis d, int world_rank, int reporter, Millis grace,
                std::shared_ptr<void> keep)
      : TimeoutError(d.line),
        timeout_line_(std::move(timeout_line)),
        diagnosis_(std::move(d)),
        world_rank_(world_rank),
        reporter_(reporter),
        grace_(grace),
        keep_(std::move(keep)) {}
  const std::string& timeout_line() const { return timeout_line_; }
  const Diagnosis& diagnosis() const { return diagnosis_; }
  int world_rank() const { return world_rank_; }
  int reporter() const { return reporter_; }
  bool reports_here() const { return reporter_ == world_rank_; }
  // How long a rank that does not report answers its peers before it reports itself (the
  // reporter may still be inside an operation of its own when it answered): 2 x (timeout +
  // window) + 10 s.
  Millis grace() const { return grace_; }

 private:
  std::string timeout_line_;
  Diagnosis diagnosis_;
  int world_rank_;
  int reporter_;
  Millis grace_;
  std::shared_ptr<void> keep_;
};

}  // namespace st::comm
