// The process's poll hooks (see poll_hooks.h).
#include "comm/poll_hooks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace st::comm {
namespace {
std::mutex g_hooks_mu;
std::vector<std::weak_ptr<PollHook>>& hooks() {
  static auto* h = new std::vector<std::weak_ptr<PollHook>>();  // never destroyed (used at exit)
  return *h;
}
std::atomic<int64_t> g_last_hooks_ns{0};  // steady_clock time of the last run
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

void run_poll_hooks_for(std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    run_poll_hooks(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing else to do: leave the core
  }
}

}  // namespace st::comm
