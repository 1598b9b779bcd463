// Per-device, per-category byte counters (lock-free: relaxed atomics, peaks by compare-exchange).
#include "tensor/memory_category.h"

#include <atomic>

namespace st {
namespace {

thread_local MemoryCategory t_category = MemoryCategory::other;

struct Counters {
  std::atomic<size_t> in_use[kMemoryCategories]{};
  std::atomic<size_t> peak[kMemoryCategories]{};
  std::atomic<size_t> total{0}, total_peak{0};
};
Counters g_counters[2];  // Device::cpu, Device::cuda

Counters& counters(Device d) { return g_counters[d == Device::cpu ? 0 : 1]; }

void raise(std::atomic<size_t>& peak, size_t now) {
  size_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::other: return "other";
    case MemoryCategory::params: return "params";
    case MemoryCategory::grads: return "grads";
    case MemoryCategory::optim: return "optim";
    case MemoryCategory::activations: return "activations";
  }
  return "?";
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : prev_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = prev_; }

void memory_account_alloc(Device device, MemoryCategory c, size_t bytes) {
  Counters& k = counters(device);
  const size_t i = static_cast<size_t>(c);
  raise(k.peak[i], k.in_use[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise(k.total_peak, k.total.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void memory_account_free(Device device, MemoryCategory c, size_t bytes) {
  Counters& k = counters(device);
  k.in_use[static_cast<size_t>(c)].fetch_sub(bytes, std::memory_order_relaxed);
  k.total.fetch_sub(bytes, std::memory_order_relaxed);
}

MemoryUsage memory_usage(Device device) {
  Counters& k = counters(device);
  MemoryUsage u;
  for (int i = 0; i < kMemoryCategories; ++i) {
    u.in_use[static_cast<size_t>(i)] = k.in_use[i].load(std::memory_order_relaxed);
    u.peak[static_cast<size_t>(i)] = k.peak[i].load(std::memory_order_relaxed);
  }
  u.total_in_use = k.total.load(std::memory_order_relaxed);
  u.total_peak = k.total_peak.load(std::memory_order_relaxed);
  return u;
}

void reset_memory_peaks(Device device) {
  Counters& k = counters(device);
  for (int i = 0; i < kMemoryCategories; ++i) k.peak[i].store(k.in_use[i].load(std::memory_order_relaxed));
  k.total_peak.store(k.total.load(std::memory_order_relaxed));
}

}  // namespace st
