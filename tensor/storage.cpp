#include "tensor/storage.h"

#include <atomic>
#include <cstdlib>

#include "tensor/allocate_now.h"
#include "tensor/error.h"

namespace st {

namespace {
constexpr size_t kAlign = 64;
std::atomic<size_t> g_cpu_bytes{0};
std::atomic<size_t> g_cpu_peak{0};
}  // namespace

namespace {
thread_local bool t_defer = false;
}  // namespace

Storage::DeferAllocation::DeferAllocation() : prev_(t_defer) { t_defer = true; }
Storage::DeferAllocation::~DeferAllocation() { t_defer = prev_; }
AllocateNow::AllocateNow() : prev_(t_defer) { t_defer = false; }
AllocateNow::~AllocateNow() { t_defer = prev_; }

Storage::Storage(size_t bytes, Device device)
    : bytes_(bytes), device_(device), category_(current_memory_category()) {
  if (!t_defer) allocate();
}

void Storage::allocate() {
  if (bytes_ == 0 || data_) return;
  if (device_ == Device::cpu) {
    memory_cap_check(device_, bytes_);  // --max-memory, before a byte is allocated
    size_t rounded = (bytes_ + kAlign - 1) / kAlign * kAlign;
    data_ = std::aligned_alloc(kAlign, rounded);
    if (!data_) ST_THROW(OutOfMemoryError, "CPU allocation of " << bytes_ << " bytes failed");
    size_t now = g_cpu_bytes.fetch_add(bytes_) + bytes_;
    size_t peak = g_cpu_peak.load();
    while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
    }
  } else {
    data_ = cuda::device_alloc(bytes_);
  }
  memory_account_alloc(device_, category_, bytes_);
}

void Storage::deallocate() {
  if (!data_) return;
  memory_account_free(device_, category_, bytes_);
  if (device_ == Device::cpu) {
    std::free(data_);
    g_cpu_bytes.fetch_sub(bytes_);
  } else {
    cuda::device_free(data_, bytes_);
  }
  data_ = nullptr;
}

void Storage::release() { deallocate(); }
void Storage::reallocate() { allocate(); }

void Storage::set_category(MemoryCategory c) {
  if (c == category_) return;
  if (data_) {
    memory_account_alloc(device_, c, bytes_);
    memory_account_free(device_, category_, bytes_);
  }
  category_ = c;
}

Storage::~Storage() { deallocate(); }

size_t cpu_bytes_in_use() { return g_cpu_bytes.load(); }
size_t cpu_bytes_peak() { return g_cpu_peak.load(); }

}  // namespace st
