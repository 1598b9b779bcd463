// Work's deadline loop and CommState's broken flag (see work.h).
#include "comm/work.h"

#include <cstdio>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <vector>

#include "comm/poll.h"
#include "tensor/error.h"

namespace st::comm {

void CommState::set_timeout(Millis t) {
  ST_CHECK(t.count() > 0, ValueError, "communicator '" << name_ << "': timeout must be > 0 ms, got " << t.count());
  timeout_ms_.store(t.count());
}

std::string CommState::broken_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void CommState::mark_broken(const std::string& reason) {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load()) return;
    reason_ = reason;
    broken_.store(true);
    hook = std::move(abort_hook_);
  }
  if (hook) hook();
}

std::string CommState::where() const {
  std::ostringstream os;
  os << "rank " << rank_ << " of " << size_ << " in group '" << name_ << "'";
  return os.str();
}

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

bool Work::poll_and_finish() {
  if (done_) return true;
  if (!poll()) return false;
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
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool done = poll_until(deadline, [&] {
    if (poll_and_finish()) return true;
    if (state_->broken()) fail_broken();
    return false;
  });
  if (done) return;
  std::ostringstream os;
  os << "comm timeout: " << describe() << " did not complete within " << std::fixed << std::setprecision(1)
     << std::chrono::duration<double>(timeout).count()
     << " s (a peer is dead, stuck, or issued collectives in a different order)";
  abandoned_ = true;
  abandon();
  state_->mark_broken(os.str());
  throw TimeoutError(os.str());
}

namespace {
std::mutex g_keep_mu;
std::vector<std::shared_ptr<void>>* g_keep = nullptr;  // never destroyed: outlives every request
}  // namespace

void keep_alive_forever(std::shared_ptr<void> buffers) {
  std::lock_guard<std::mutex> lock(g_keep_mu);
  if (!g_keep) g_keep = new std::vector<std::shared_ptr<void>>();
  g_keep->push_back(std::move(buffers));
}

}  // namespace st::comm
