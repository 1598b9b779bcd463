// The stop request (runtime/common/stop_request.h).
#include "runtime/common/stop_request.h"

#include <atomic>
#include <csignal>
#include <mutex>

namespace st::runtime {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler's store must be lock-free");

std::atomic<int> g_grace{30};
std::atomic<bool> g_armed{false};
std::mutex g_mutex;
std::optional<StopRecord> g_record;

}  // namespace

void request_stop(int signal) noexcept {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);
}

int stop_signal() noexcept { return g_signal.load(); }

void clear_stop_request() noexcept {
  g_signal.store(0);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_record.reset();
}

void record_stop(const StopRecord& r) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_record = r;
}

std::optional<StopRecord> recorded_stop() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_record;
}

void set_stop_armed(bool armed) noexcept { g_armed.store(armed); }
bool stop_armed() noexcept { return g_armed.load(); }

void set_stop_grace(int seconds) noexcept { g_grace.store(seconds); }
int stop_grace() noexcept { return g_grace.load(); }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace st::runtime
