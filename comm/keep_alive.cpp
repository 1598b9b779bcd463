// The process-wide list of abandoned buffers (see keep_alive.h).
#include "comm/keep_alive.h"

#include <mutex>
#include <vector>

namespace st::comm {
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
