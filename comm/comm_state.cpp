// CommState's broken flag and the process's list of communicators (see comm_state.h).
#include "comm/comm_state.h"

#include <algorithm>
#include <sstream>

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

namespace {
std::mutex g_states_mu;
std::vector<std::weak_ptr<CommState>>& states() {
  static auto* s = new std::vector<std::weak_ptr<CommState>>();  // never destroyed (read at exit)
  return *s;
}
}  // namespace

void register_comm_state(const std::shared_ptr<CommState>& state) {
  std::lock_guard<std::mutex> lock(g_states_mu);
  auto& s = states();
  s.erase(std::remove_if(s.begin(), s.end(), [](const std::weak_ptr<CommState>& w) { return w.expired(); }), s.end());
  s.push_back(state);
}

std::vector<std::shared_ptr<CommState>> live_comm_states() {
  std::vector<std::shared_ptr<CommState>> out;
  std::lock_guard<std::mutex> lock(g_states_mu);
  for (const auto& w : states())
    if (auto p = w.lock()) out.push_back(std::move(p));
  return out;
}

}  // namespace st::comm
