// Per-device, per-category byte counters (lock-free: relaxed atomics, peaks by compare-exchange).
#include "tensor/memory_category.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "tensor/error.h"

namespace st {
namespace {

thread_local MemoryCategory t_category = MemoryCategory::other;
thread_local std::string t_layer;

std::atomic<size_t> g_cap{0};
std::mutex g_note_mu;
std::string g_note;  // guarded by g_note_mu

std::string human(size_t bytes) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double b = static_cast<double>(bytes);
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, unit[u]);
  return buf;
}

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

const std::string& current_memory_layer() { return t_layer; }

MemoryLayerScope::MemoryLayerScope(std::string layer) : prev_(std::move(t_layer)) { t_layer = std::move(layer); }
MemoryLayerScope::~MemoryLayerScope() { t_layer = std::move(prev_); }

void set_memory_cap(size_t bytes, std::string note) {
  std::lock_guard<std::mutex> lock(g_note_mu);
  g_note = std::move(note);
  g_cap.store(bytes);
}

size_t memory_cap() { return g_cap.load(); }

void memory_cap_check(Device device, size_t bytes) {
  const size_t cap = g_cap.load(std::memory_order_relaxed);
  if (cap == 0) return;
  const MemoryUsage u = memory_usage(device);
  if (u.total_in_use + bytes <= cap) return;
  std::ostringstream o;
  o << "out of memory under --max-memory " << human(cap) << ": allocating " << human(bytes) << " ("
    << bytes << " bytes) of " << memory_category_name(current_memory_category())
    << (t_layer.empty() ? std::string() : " in " + t_layer) << " on the " << device_name(device) << " with "
    << human(u.total_in_use) << " in use (";
  for (int i = 1; i <= kMemoryCategories; ++i) {  // other last
    const auto c = static_cast<MemoryCategory>(i % kMemoryCategories);
    o << memory_category_name(c) << " " << human(u.in_use_of(c)) << (i < kMemoryCategories ? ", " : ")");
  }
  {
    std::lock_guard<std::mutex> lock(g_note_mu);
    if (!g_note.empty()) o << "; " << g_note;
  }
  throw OutOfMemoryError(o.str());
}

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
