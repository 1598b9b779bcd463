// Work's deadline loop, CommState's broken flag, the process's poll hooks and what this thread is
// waiting for (see work.h).
#include "comm/work.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <vector>

#include "comm/poll.h"
#include "comm/side_channel.h"
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
  WaitingScope waiting(this);
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
  // Named before the communicator breaks: the side channel asks the peers what they reached (and
  // this rank keeps answering them meanwhile), within min(5 s, timeout).
  const std::string line = timeout_line(timeout);
  state_->mark_broken(line);
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

std::string WorkGroup::pending_note() const {
  for (const auto& p : parts_) {
    const std::string n = p->pending_note();
    if (!n.empty()) return n;
  }
  return "";
}

std::string Work::timeout_line(Millis timeout) const {
  std::string note = pending_note();
  if (const auto& side = state_->side_channel()) {
    try {
      std::string line = side->explain_timeout(*this, timeout);
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

namespace {
std::mutex g_keep_mu;
std::vector<std::shared_ptr<void>>* g_keep = nullptr;  // never destroyed: outlives every request
}  // namespace

void keep_alive_forever(std::shared_ptr<void> buffers) {
  std::lock_guard<std::mutex> lock(g_keep_mu);
  if (!g_keep) g_keep = new std::vector<std::shared_ptr<void>>();
  g_keep->push_back(std::move(buffers));
}

namespace {
std::mutex g_hooks_mu;
std::vector<std::weak_ptr<PollHook>>& hooks() {
  static auto* h = new std::vector<std::weak_ptr<PollHook>>();  // never destroyed (used at exit)
  return *h;
}
std::atomic<int64_t> g_last_hooks_ns{0};  // steady_clock time of the last run
thread_local const Work* t_waiting_work = nullptr;
thread_local const std::string* t_waiting_what = nullptr;
}  // namespace

void register_poll_hook(std::weak_ptr<PollHook> hook) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  hooks().push_back(std::move(hook));
}

void run_poll_hooks(bool force) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (!force && now - g_last_hooks_ns.load(std::memory_order_relaxed) < 1000000) return;  // the hot path
  g_last_hooks_ns.store(now, std::memory_order_relaxed);
  std::vector<std::shared_ptr<PollHook>> live;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    auto& h = hooks();
    h.erase(std::remove_if(h.begin(), h.end(), [](const std::weak_ptr<PollHook>& w) { return w.expired(); }),
            h.end());
    for (const auto& w : h)
      if (auto p = w.lock()) live.push_back(std::move(p));
  }
  // Outside the lock: a hook may create or drop others.
  for (const auto& p : live) p->on_poll();
}

WaitingScope::WaitingScope(const Work* w) : prev_work_(t_waiting_work), prev_what_(t_waiting_what) {
  t_waiting_work = w;
  t_waiting_what = nullptr;
}
WaitingScope::WaitingScope(const std::string* what) : prev_work_(t_waiting_work), prev_what_(t_waiting_what) {
  t_waiting_work = nullptr;
  t_waiting_what = what;
}
WaitingScope::~WaitingScope() {
  t_waiting_work = prev_work_;
  t_waiting_what = prev_what_;
}

std::string WaitingScope::current() {
  if (t_waiting_work) {
    const Work& w = *t_waiting_work;
    return w.op() + " seq " + std::to_string(w.seq()) + " in group '" + w.comm_state()->name() + "'";
  }
  if (t_waiting_what) return *t_waiting_what;
  return "";
}

}  // namespace st::comm
