// The start-up phase hook (see the header).
#include "runtime/common/startup_phase.h"

#include <mutex>

namespace st::runtime {
namespace {
std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(const std::string&)>& hook() {
  static std::function<void(const std::string&)> h;
  return h;
}
}  // namespace

void set_startup_hook(std::function<void(const std::string& phase)> h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook() = std::move(h);
}

void startup_phase(const std::string& phase) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  if (h) h(phase);
}

}  // namespace st::runtime
