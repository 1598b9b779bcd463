// The side channel's questions, answers and timeout lines (see side_channel.h).
//
// Messages on the private communicator: a question is one int64 (the asker's round); an answer is
// a fixed 256-byte Answer to the asker, tag kAnswer. Answers are sent with MPI_Isend and tested
// later; every buffer a request may still touch stays alive with the request. A report question
// (kReportQuestion, from the deadline diagnosis) is answered with the round and the encoded
// report of the whole process (kReportAnswer).
#include "comm/side_channel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "comm/flight_report.h"
#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"
#include "comm/poll.h"
#include "comm/wait_state.h"

namespace st::comm {
namespace {

constexpr int kQuestion = 1;
constexpr int kAnswer = 2;

struct Answer {
  int64_t round = 0;
  int64_t collectives = 0;   // collectives issued on the communicator
  int64_t sends_to_you = 0;  // sends issued to the asker
  int64_t recvs_from_you = 0;
  char waiting[224] = {};  // what the rank waits in now, NUL-terminated
};
static_assert(sizeof(Answer) == 256);

}  // namespace

struct SideChannel::Ask {
  int peer = 0;  // group rank
  int64_t question = 0;
  Answer answer;
  MPI_Request sent = MPI_REQUEST_NULL;
  MPI_Request received = MPI_REQUEST_NULL;
  bool answered = false;
};

namespace {

std::string seconds(Millis t) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << std::chrono::duration<double>(t).count() << " s";
  return os.str();
}

std::string waits(const Answer& a) {
  return a.waiting[0] ? std::string(a.waiting) : std::string("nothing");
}

}  // namespace

std::string rank_list(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  std::ostringstream os;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (i) os << ",";
    if (j - i >= 2)
      os << r[i] << "-" << r[j];
    else
      for (size_t k = i; k <= j; ++k) os << (k > i ? "," : "") << r[k];
    i = j + 1;
  }
  return os.str();
}

Millis SideChannel::window(Millis timeout) { return std::min(timeout, Millis(5000)); }

SideChannel::SideChannel(MPI_Comm comm, std::weak_ptr<CommState> state, std::vector<int> world)
    : comm_(comm), state_(std::move(state)), world_(std::move(world)), asked_by_(world_.size(), 0) {}

std::shared_ptr<SideChannel> SideChannel::create(MPI_Comm comm, const std::shared_ptr<CommState>& state,
                                                 Millis timeout) {
  const std::string what = state->where() + ", creating the side channel (MPI_Comm_idup)";
  MPI_Comm side = MPI_COMM_NULL;
  MPI_Request req;
  CHECK_MPI(MPI_Comm_idup(comm, &side, &req), what);
  mpi_wait_deadline(&req, timeout, what);
  mpi_errors_return(side, what);
  // World rank of every group rank (local: no communication).
  MPI_Group group, world_group;
  CHECK_MPI(MPI_Comm_group(side, &group), what);
  CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_group), what);
  std::vector<int> mine(static_cast<size_t>(state->size())), world(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<int>(i);
  CHECK_MPI(MPI_Group_translate_ranks(group, state->size(), mine.data(), world_group, world.data()), what);
  CHECK_MPI(MPI_Group_free(&group), what);
  CHECK_MPI(MPI_Group_free(&world_group), what);
  state->set_world_ranks(world);
  std::shared_ptr<SideChannel> s(new SideChannel(side, state, std::move(world)));
  register_poll_hook(s);
  return s;
}

SideChannel::~SideChannel() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  for (InFlight& f : in_flight_) {
    // A request still pending (an answer nobody receives, a question to a stopped rank): MPI
    // completes or drops it on its own; its buffer must outlive it.
    if (f.req == MPI_REQUEST_NULL) continue;
    MPI_Request_free(&f.req);  // a destructor cannot throw; the buffer is kept either way
    keep_alive_forever(f.buffer);
  }
  // After a timeout the peers may still send here; a freed context id could be reused by a later
  // communicator and receive those messages, so this one is kept (as a broken communicator's is).
  if (!asked_ && !failed_) MPI_Comm_free(&comm_);
}

std::string SideChannel::where() const {
  auto st = state_.lock();
  return (st ? st->where() : std::string("a released communicator")) + ", side channel";
}

void SideChannel::reap() {
  for (InFlight& f : in_flight_) {
    int flag = 0;
    CHECK_MPI(MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE), where());
  }
  in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                  [](const InFlight& f) { return f.req == MPI_REQUEST_NULL; }),
                   in_flight_.end());
}

void SideChannel::on_poll() { serve(); }

void SideChannel::ask_and_wait(std::vector<Ask>& asks, int64_t round, Millis window) {
  for (Ask& a : asks) {
    a.question = round;
    CHECK_MPI(MPI_Irecv(&a.answer, sizeof(Answer), MPI_BYTE, a.peer, kAnswer, comm_, &a.received), where());
    CHECK_MPI(MPI_Isend(&a.question, 1, MPI_INT64_T, a.peer, kQuestion, comm_, &a.sent), where());
  }
  poll_until(std::chrono::steady_clock::now() + window, [&] {
    bool all = true;
    for (Ask& a : asks) {
      int flag = 0;
      if (a.sent != MPI_REQUEST_NULL) CHECK_MPI(MPI_Test(&a.sent, &flag, MPI_STATUS_IGNORE), where());
      if (!a.answered) {
        CHECK_MPI(MPI_Test(&a.received, &flag, MPI_STATUS_IGNORE), where());
        if (flag && a.answer.round == round)
          a.answered = true;
        else if (flag)  // a late answer to an earlier round: wait for this round's
          CHECK_MPI(MPI_Irecv(&a.answer, sizeof(Answer), MPI_BYTE, a.peer, kAnswer, comm_, &a.received), where());
      }
      all = all && a.answered;
    }
    serve();  // the others ask this rank too
    run_poll_hooks();
    // Done when every peer answered and also asked (it timed out too, and has this rank's answer):
    // leaving earlier would leave a peer whose deadline passes a moment later without an answer
    // from this alive rank, and the ranks would name different causes.
    bool asked = true;
    for (const Ask& a : asks) asked = asked && asked_by_[static_cast<size_t>(a.peer)];
    return all && asked && in_flight_.empty();
  });
}

void SideChannel::serve() {
  if (failed_) return;
  auto st = state_.lock();
  if (!st) return;
  try {
    reap();
    for (;;) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status status;
      CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, kQuestion, comm_, &flag, &msg, &status), where());
      if (!flag) break;
      auto a = std::make_shared<Answer>();
      CHECK_MPI(MPI_Mrecv(&a->round, 1, MPI_INT64_T, &msg, MPI_STATUS_IGNORE), where());
      const auto asker = static_cast<size_t>(status.MPI_SOURCE);
      if (asker < asked_by_.size()) asked_by_[asker] = 1;
      const CommState::Progress& p = st->progress();
      a->collectives = static_cast<int64_t>(p.collectives);
      a->sends_to_you = asker < p.sends_to.size() ? static_cast<int64_t>(p.sends_to[asker]) : 0;
      a->recvs_from_you = asker < p.recvs_from.size() ? static_cast<int64_t>(p.recvs_from[asker]) : 0;
      const std::string now = WaitingScope::current();
      std::strncpy(a->waiting, now.c_str(), sizeof(a->waiting) - 1);
      MPI_Request req;
      CHECK_MPI(MPI_Isend(a.get(), sizeof(Answer), MPI_BYTE, status.MPI_SOURCE, kAnswer, comm_, &req), where());
      in_flight_.push_back({req, a});
    }
    for (;;) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status status;
      CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, kReportQuestion, comm_, &flag, &msg, &status), where());
      if (!flag) break;
      int64_t round = 0;
      CHECK_MPI(MPI_Mrecv(&round, 1, MPI_INT64_T, &msg, MPI_STATUS_IGNORE), where());
      answer_report(status.MPI_SOURCE, round);
    }
  } catch (const CommError& e) {
    failed_ = true;
    failure_ = e.what();
  }
}

void SideChannel::answer_report(int asker, int64_t round) {
  int world_rank = 0;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), where());
  // round, then the report: one message of bytes
  auto buf = std::make_shared<std::string>(sizeof(int64_t), '\0');
  std::memcpy(buf->data(), &round, sizeof(round));
  *buf += encode_report(build_rank_report(world_rank));
  MPI_Request req;
  CHECK_MPI(MPI_Isend(buf->data(), static_cast<int>(buf->size()), MPI_BYTE, asker, kReportAnswer, comm_, &req),
            where());
  in_flight_.push_back({req, buf});
}

std::string SideChannel::explain_timeout(const std::string& op, uint64_t seq, const Awaited& aw, Millis waited) {
  if (failed_) throw CommError(failure_);
  auto st = state_.lock();
  if (!st) throw CommError("side channel: communicator released");
  asked_ = true;
  const int me = st->rank();
  const Millis win = window(waited);
  const int64_t round = ++round_;

  // Whom to ask, in group-rank order: the whole group for a collective, the peers for p2p.
  auto asks = std::make_shared<std::vector<Ask>>();  // outlives requests on its buffers
  if (aw.collective) {
    for (int r = 0; r < st->size(); ++r)
      if (r != me) asks->emplace_back().peer = r;
  } else {
    for (const auto& t : aw.transfers) asks->emplace_back().peer = t.peer;
  }
  try {
    ask_and_wait(*asks, round, win);
  } catch (const CommError& e) {
    keep_alive_forever(asks);  // requests may still be posted on its buffers
    failed_ = true;
    failure_ = e.what();
    throw;
  }
  for (Ask& a : *asks) {
    if (a.received != MPI_REQUEST_NULL) {
      if (MPI_Cancel(&a.received) != MPI_SUCCESS) keep_alive_forever(asks);
      in_flight_.push_back({a.received, asks});
    }
    if (a.sent != MPI_REQUEST_NULL) in_flight_.push_back({a.sent, asks});
  }

  auto wr = [&](int group_rank) { return world_[static_cast<size_t>(group_rank)]; };
  const std::string no_answer =
      "no answer on the side channel within " + seconds(win) + ": busy outside comm, stopped or dead";
  const std::string group = "group '" + st->name() + "' [ranks " + rank_list(world_) + "]";
  std::ostringstream os;
  os << "comm timeout: ";
  if (aw.collective) {
    std::vector<std::pair<int, std::string>> missing;  // world rank, why
    for (const Ask& a : *asks) {
      if (!a.answered) {
        missing.emplace_back(wr(a.peer), no_answer);
      } else if (a.answer.collectives <= static_cast<int64_t>(seq)) {
        std::string seen = a.answer.collectives == 0 ? "no collective issued yet"
                                                     : "last seen at seq " + std::to_string(a.answer.collectives - 1);
        missing.emplace_back(wr(a.peer), seen + "; waiting in " + waits(a.answer));
      }
    }
    if (missing.empty()) {
      os << op << " seq " << seq << " in " << group << " did not complete within " << seconds(waited)
         << " although every rank issued it (they may have issued different collectives at this position: "
            "SHARDTRAIN_COMM_DEBUG=1 compares them)";
      return os.str();
    }
    os << (missing.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i].first;
    os << " did not reach " << op << " seq " << seq << " in " << group << " within " << seconds(waited)
       << " (";
    if (missing.size() == 1) {
      os << missing[0].second;
    } else {
      const size_t shown = std::min<size_t>(missing.size(), 8);
      for (size_t i = 0; i < shown; ++i)
        os << (i ? "; " : "") << "rank " << missing[i].first << ": " << missing[i].second;
      if (shown < missing.size()) os << "; and " << missing.size() - shown << " more";
    }
    os << ")";
    return os.str();
  }
  // Point to point: per peer, whether it issued the matching transfers.
  os << op << " seq " << seq << " of rank " << wr(me) << " in " << group << " did not complete within "
     << seconds(waited) << ": ";
  for (size_t i = 0; i < asks->size(); ++i) {
    const Ask& a = (*asks)[i];
    const Awaited::Transfer& t = aw.transfers[i];
    os << (i ? "; " : "") << "rank " << wr(a.peer);
    if (!a.answered) {
      os << ": " << no_answer;
      continue;
    }
    std::vector<std::string> lacks;
    if (t.recv_index > 0 && a.answer.sends_to_you < static_cast<int64_t>(t.recv_index))
      lacks.push_back("has not issued the matching send (it issued " + std::to_string(a.answer.sends_to_you) +
                      " sends to rank " + std::to_string(wr(me)) + ", this receive is number " +
                      std::to_string(t.recv_index) + ")");
    if (t.send_index > 0 && a.answer.recvs_from_you < static_cast<int64_t>(t.send_index))
      lacks.push_back("has not issued the matching receive (it issued " + std::to_string(a.answer.recvs_from_you) +
                      " receives from rank " + std::to_string(wr(me)) + ", this send is number " +
                      std::to_string(t.send_index) + ")");
    if (lacks.empty()) lacks.push_back("issued the matching transfers");
    for (size_t k = 0; k < lacks.size(); ++k) os << (k ? " and " : " ") << lacks[k];
    os << " and waits in " << waits(a.answer);
  }
  return os.str();
}

}  // namespace st::comm
