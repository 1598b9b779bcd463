// Gathering every rank's report at a deadline (see deadline_gather.h). Messages on the world's
// side channel: the question is one int64 (the asker's round), the answer that round followed by
// the encoded report (any length: received with MPI_Improbe + MPI_Mrecv).
#include "comm/deadline_gather.h"

#include <algorithm>
#include <cstring>

#include "comm/deadline_diagnosis.h"
#include "comm/flight_dump.h"
#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"
#include "comm/poll.h"
#include "comm/poll_hooks.h"
#include "comm/side_channel.h"

namespace st::comm {

struct DeadlineGather::Pending {
  int peer = 0;  // rank in the world communicator
  int64_t question = 0;
  MPI_Request sent = MPI_REQUEST_NULL;
  std::optional<RankReport> report;
};

DeadlineGather::DeadlineGather(const std::shared_ptr<CommState>& world, const CommOptions& options)
    : world_(world), dump_dir_(options.flight_recorder_dump) {}

void DeadlineGather::begin(Millis timeout) {
  timeout_ = timeout;
  window_ = SideChannel::window(timeout);
  begun_ns_ = flight_now_ns();
  pending_.reset();
  auto world = world_.lock();
  if (!world) return;
  side_ = std::dynamic_pointer_cast<SideChannel>(world->explainer());
  if (!side_) return;
  side_->keep_comm();
  const int64_t round = ++round_;
  auto p = std::make_shared<std::vector<Pending>>();
  for (int r = 0; r < world->size(); ++r)
    if (r != world->rank()) p->emplace_back().peer = r;
  try {
    for (Pending& q : *p) {
      q.question = round;
      CHECK_MPI(MPI_Isend(&q.question, 1, MPI_INT64_T, q.peer, SideChannel::kReportQuestion, side_->comm(), &q.sent),
                world->where() + ", deadline report question");
    }
  } catch (const CommError&) {
    keep_alive_forever(p);  // sends may be posted on its buffers
    side_.reset();
    return;
  }
  pending_ = std::move(p);
}

void DeadlineGather::conclude(const std::string& line) {
  auto world = world_.lock();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<std::optional<RankReport>> reports(static_cast<size_t>(world_size));
  if (pending_ && side_ && world) {
    const int64_t round = round_;
    const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(begun_ns_)) + window_;
    try {
      poll_until(deadline, [&] {
        bool all = true;
        for (Pending& q : *pending_) {
          int flag = 0;
          if (q.sent != MPI_REQUEST_NULL) CHECK_MPI(MPI_Test(&q.sent, &flag, MPI_STATUS_IGNORE), world->where());
          while (!q.report) {
            MPI_Message msg;
            MPI_Status st;
            CHECK_MPI(MPI_Improbe(q.peer, SideChannel::kReportAnswer, side_->comm(), &flag, &msg, &st), world->where());
            if (!flag) break;
            int n = 0;
            CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &n), world->where());
            std::string bytes(static_cast<size_t>(n), '\0');
            CHECK_MPI(MPI_Mrecv(bytes.data(), n, MPI_BYTE, &msg, MPI_STATUS_IGNORE), world->where());
            int64_t got = 0;
            if (bytes.size() >= sizeof(got)) std::memcpy(&got, bytes.data(), sizeof(got));
            if (got != round) continue;  // a late answer to an earlier round
            try {
              q.report = decode_report(bytes.substr(sizeof(got)));
            } catch (const CommError&) {
              break;  // malformed: counted as no answer
            }
          }
          all = all && q.report.has_value();
        }
        run_poll_hooks();  // this rank answers the others meanwhile
        return all;
      });
    } catch (const CommError&) {
      // the side channel failed: diagnose with what came
    }
    for (Pending& q : *pending_) {
      if (q.report && q.peer < static_cast<int>(world->world_ranks().size())) {
        const int w = world->world_ranks()[static_cast<size_t>(q.peer)];
        if (w >= 0 && w < world_size) reports[static_cast<size_t>(w)] = std::move(q.report);
      }
      if (q.sent != MPI_REQUEST_NULL) {
        MPI_Request_free(&q.sent);  // a question to a rank that never took it
        keep_alive_forever(pending_);
      }
    }
  }
  reports[static_cast<size_t>(me)] = build_rank_report(me);
  Diagnosis d = diagnose(reports, window_);
  int reporter = me;
  for (int r = 0; r < me; ++r)
    if (reports[static_cast<size_t>(r)]) {
      reporter = r;
      break;
    }
  if (!dump_dir_.empty()) {
    try {
      dump_reports(dump_dir_, reports, me);
    } catch (const std::exception& e) {
      d.line += " (flight recorder dump failed: " + std::string(e.what()) + ")";
    }
  }
  // What must outlive the communicators for the answers to go on: the world's side channel and
  // every communicator's state (its progress and ring).
  struct Keep {
    std::shared_ptr<SideChannel> side;
    std::vector<std::shared_ptr<CommState>> states;
  };
  auto keep = std::make_shared<Keep>(Keep{side_, live_comm_states()});
  side_.reset();
  pending_.reset();
  const Millis grace = 2 * (timeout_ + window_) + Millis(10000);
  throw DeadlineError(line, std::move(d), me, reporter, grace, std::move(keep));
}

}  // namespace st::comm
