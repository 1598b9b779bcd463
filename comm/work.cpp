// Work's deadline loop and the flight recorder's times (see work.h).
#include "comm/work.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "comm/poll.h"
#include "comm/poll_hooks.h"
#include "comm/wait_state.h"
#include "tensor/error.h"

namespace st::comm {

Work::Work(std::shared_ptr<CommState> state, std::string op, uint64_t seq)
    : state_(std::move(state)), op_(std::move(op)), seq_(seq) {}

Work::~Work() = default;

void Work::settle() noexcept {
  if (done_ || abandoned_) return;
  if (state_->broken()) {
    abandoned_ = true;
    abandon();
    return;
  }
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtrain: unfinished Work dropped: %s\n", e.what());
  }
}

std::string Work::describe() const {
  std::ostringstream os;
  os << state_->where() << ", op " << op_ << ", seq " << seq_;
  return os.str();
}

void Work::record_progress(bool finished) {
  if (flight_n_ == 0 || (flight_started_ && !finished)) return;
  const auto& rec = state_->recorder();
  if (!rec) return;
  if (!flight_started_ && (finished || started())) {
    rec->mark_started(flight_first_, flight_n_, flight_now_ns());
    flight_started_ = true;
  }
  if (finished) rec->mark_completed(flight_first_, flight_n_, flight_now_ns());
}

bool Work::poll_and_finish() {
  if (done_) return true;
  const bool finished = poll();
  record_progress(finished);
  if (!finished) return false;
  done_ = true;
  finish();
  return true;
}

bool Work::is_completed() {
  if (done_) return true;
  if (abandoned_) return false;
  if (state_->broken()) return false;
  return poll_and_finish();
}

void Work::wait(Millis timeout) {
  if (done_) return;
  auto fail_broken = [&]() {
    if (!abandoned_) {
      abandoned_ = true;
      abandon();
    }
    ST_THROW(CommError, "comm error: " << describe() << ": communicator is broken: " << state_->broken_reason());
  };
  if (abandoned_ || state_->broken()) fail_broken();
  if (timeout.count() < 0) timeout = state_->timeout();
  WaitingScope waiting(*state_, op_, seq_, awaited_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool done = poll_until(deadline, [&] {
    if (poll_and_finish()) return true;
    if (state_->broken()) fail_broken();
    run_poll_hooks();
    return false;
  });
  if (done) return;
  abandoned_ = true;
  abandon();
  note_timed_out(*state_, op_, seq_, awaited_);
  // The world's diagnoser asks every rank for its flight recorder first, so that its window runs
  // alongside the side channel's; the side channel names the missing peer (this rank keeps
  // answering both meanwhile), within min(5 s, timeout). Named before the communicator breaks.
  const std::shared_ptr<DeadlineDiagnoser> diagnoser = state_->diagnoser();
  if (diagnoser) diagnoser->begin(timeout);
  const std::string line = timeout_line(timeout);
  state_->mark_broken(line);
  if (diagnoser) diagnoser->conclude(line);  // throws DeadlineError
  throw TimeoutError(line);
}

void Work::wait_on_stream() {
  if (done_) return;
  if (abandoned_ || state_->broken() || !stream_wait()) wait();
}

WorkGroup::WorkGroup(std::shared_ptr<CommState> state, std::string op, uint64_t seq,
                     std::vector<std::shared_ptr<Work>> parts)
    : Work(std::move(state), std::move(op), seq), parts_(std::move(parts)) {}

bool WorkGroup::poll() {
  bool all = true;
  for (const auto& p : parts_) all = p->is_completed() && all;  // every part polled each time
  return all;
}

bool WorkGroup::stream_wait() {
  for (const auto& p : parts_) p->wait_on_stream();
  return true;
}

bool WorkGroup::started() const {
  for (const auto& p : parts_)
    if (!p->started()) return false;
  return true;
}

std::string WorkGroup::pending_note() const {
  for (const auto& p : parts_) {
    const std::string n = p->pending_note();
    if (!n.empty()) return n;
  }
  return "";
}

std::string Work::timeout_line(Millis timeout) const {
  std::string note = pending_note();
  if (const auto& explainer = state_->explainer()) {
    try {
      std::string line = explainer->explain_timeout(op_, seq_, awaited_, timeout);
      return note.empty() ? line : line + "; " + note;
    } catch (const std::exception& e) {
      note += (note.empty() ? "" : "; ") + std::string("side channel failed: ") + e.what();
    }
  }
  std::ostringstream os;
  os << "comm timeout: " << describe() << " did not complete within " << std::fixed << std::setprecision(1)
     << std::chrono::duration<double>(timeout).count()
     << " s (a peer is dead, stuck, or issued collectives in a different order)";
  if (!note.empty()) os << "; " << note;
  return os.str();
}

}  // namespace st::comm
