#include "runtime/nn/dropout_context.h"

#include <atomic>

namespace st::runtime {
namespace {

thread_local const DropoutContext* t_current = nullptr;
std::atomic<uint64_t> g_next_id{1};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const DropoutContext* dropout_context() { return t_current; }

DropoutScope::DropoutScope(int64_t step, int64_t first_sample) : outer_(t_current) {
  ctx_.id = g_next_id.fetch_add(1);
  ctx_.step = step;
  ctx_.first_sample = first_sample;
  t_current = &ctx_;
}

DropoutScope::~DropoutScope() { t_current = outer_; }

uint64_t dropout_seed(uint64_t seed, uint64_t site, uint64_t call, int64_t step) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ site);
  h = splitmix64(h ^ call);
  return splitmix64(h ^ static_cast<uint64_t>(step));
}

}  // namespace st::runtime
