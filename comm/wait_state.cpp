// This thread's wait and the process's last timeout (see wait_state.h).
#include "comm/wait_state.h"

#include <mutex>

namespace st::comm {
namespace {

thread_local WaitingScope::Frame t_current;

std::mutex g_timed_out_mu;
WaitSnapshot* g_timed_out = nullptr;  // never destroyed (read at exit by late answers)

WaitSnapshot structured(const CommState& state, const std::string& op, uint64_t seq, const Awaited& awaited,
                        WaitSnapshot::State how) {
  WaitSnapshot s;
  s.state = how;
  s.group = state.name();
  s.members = state.world_ranks();
  s.rank = state.rank();
  s.op = op;
  s.seq = seq;
  s.collective = awaited.collective;
  auto world = [&](int g) {
    return g >= 0 && static_cast<size_t>(g) < s.members.size() ? s.members[static_cast<size_t>(g)] : g;
  };
  for (const Awaited::Transfer& t : awaited.transfers) s.peers.push_back({world(t.peer), t.send_index, t.recv_index});
  return s;
}

}  // namespace

std::string WaitSnapshot::describe() const {
  if (state == State::none) return "";
  if (group.empty()) return text;
  return op + " seq " + std::to_string(seq) + " in group '" + group + "'";
}

WaitingScope::WaitingScope(const CommState& state, const std::string& op, uint64_t seq, const Awaited& awaited) {
  prev_ = t_current;
  t_current = {&state, &op, seq, &awaited, nullptr};
}

WaitingScope::WaitingScope(const std::string* what) {
  prev_ = t_current;
  t_current = {nullptr, nullptr, 0, nullptr, what};
}

WaitingScope::~WaitingScope() { t_current = prev_; }

std::string WaitingScope::current() {
  if (t_current.state) return *t_current.op + " seq " + std::to_string(t_current.seq) + " in group '" +
                              t_current.state->name() + "'";
  if (t_current.what) return *t_current.what;
  return "";
}

WaitSnapshot WaitingScope::snapshot() {
  if (t_current.state)
    return structured(*t_current.state, *t_current.op, t_current.seq, *t_current.awaited, WaitSnapshot::State::waiting);
  if (t_current.what) {
    WaitSnapshot s;
    s.state = WaitSnapshot::State::waiting;
    s.text = *t_current.what;
    return s;
  }
  std::lock_guard<std::mutex> lock(g_timed_out_mu);
  return g_timed_out ? *g_timed_out : WaitSnapshot{};
}

void note_timed_out(const CommState& state, const std::string& op, uint64_t seq, const Awaited& awaited) {
  WaitSnapshot s = structured(state, op, seq, awaited, WaitSnapshot::State::timed_out);
  std::lock_guard<std::mutex> lock(g_timed_out_mu);
  if (!g_timed_out) g_timed_out = new WaitSnapshot();
  *g_timed_out = std::move(s);
}

}  // namespace st::comm
