// DeadlineGather: the world's DeadlineDiagnoser. make_communicator gives one to its world
// communicator (CommOptions::diagnose_deadlines), and every group split from the world inherits
// it, so a deadline anywhere in the job ends the same way:
//   1. begin (right after the deadline): the report question to every other world rank over the
//      world's side channel (comm/side_channel.h), without waiting;
//   2. the timed-out operation's own line (its group's side channel) — both windows run together;
//   3. conclude: the reports that came within min(5 s, timeout) of begin, this rank's own, the
//      diagnosis (comm/deadline_diagnosis.h), the dump when CommOptions::flight_recorder_dump
//      names a directory (comm/flight_dump.h: this rank's rings and every report received), and
//      DeadlineError. Its reporter is the lowest world rank that answered (or this one), so one
//      rank — rank 0 unless rank 0 itself is silent — prints the job's one line; the others keep
//      answering (a rank that stopped answering after its own deadline would look stopped to the
//      one that times out next, which is how a waiting pipeline neighbour used to be blamed).
// Every rank answers while it polls in any comm wait, or in run_poll_hooks_for.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_options.h"
#include "comm/comm_state.h"
#include "comm/flight_report.h"

namespace st::comm {

class SideChannel;

class DeadlineGather final : public DeadlineDiagnoser {
 public:
  // `world`: the world communicator's state (its side channel asks); held weakly.
  DeadlineGather(const std::shared_ptr<CommState>& world, const CommOptions& options);
  void begin(Millis timeout) override;
  [[noreturn]] void conclude(const std::string& line) override;

 private:
  struct Pending;  // a question in flight and its answer
  std::weak_ptr<CommState> world_;
  std::string dump_dir_;
  int64_t round_ = 0;
  std::shared_ptr<std::vector<Pending>> pending_;
  std::shared_ptr<SideChannel> side_;  // held from begin to conclude
  Millis timeout_{0};
  Millis window_{0};
  int64_t begun_ns_ = 0;
};

}  // namespace st::comm
