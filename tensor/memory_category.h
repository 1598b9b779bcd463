// What the memory of a rank holds: every Storage is tagged at allocation with the category that
// is current on its thread (a MemoryCategoryScope sets it: the model build → params, the
// gradient buffers → grads, the optimizer → optim, the forward/backward → activations; anything
// else is `other`), and the allocator keeps, per device and category, the bytes in use and their
// peak. The trainer reports them per step (runtime/observe/metrics.h) and per rank at the end
// of a run (runtime/observe/memory_report.h).
//
// Bytes are the tensors' requested bytes (CPU: before the 64-byte rounding; CUDA: before the
// caching allocator's size classes), so they compare with a closed form of the tensor sizes.
// A storage can change category (Storage::set_category): a parameter cast to fp16 inside the
// optimizer's constructor is still a parameter.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace st {

enum class MemoryCategory : uint8_t { other, params, grads, optim, activations };
constexpr int kMemoryCategories = 5;
const char* memory_category_name(MemoryCategory c);  // "other", "params", ...

// The category this thread's allocations get now (`other` outside any scope).
MemoryCategory current_memory_category();

// Sets this thread's category for its lifetime (nests; restores the previous one).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory prev_;
};

struct MemoryUsage {
  std::array<size_t, kMemoryCategories> in_use{}, peak{};  // by category
  size_t total_in_use = 0, total_peak = 0;                 // all categories together
  size_t in_use_of(MemoryCategory c) const { return in_use[static_cast<size_t>(c)]; }
  size_t peak_of(MemoryCategory c) const { return peak[static_cast<size_t>(c)]; }
};

// The tensors' bytes on `device` now, and the peaks since the last reset (or the start).
MemoryUsage memory_usage(Device device);
// Every peak of `device` restarts from the bytes in use now (the trainer does this per step).
void reset_memory_peaks(Device device);

// Allocator bookkeeping (tensor/storage.cpp calls these).
void memory_account_alloc(Device device, MemoryCategory c, size_t bytes);
void memory_account_free(Device device, MemoryCategory c, size_t bytes);

}  // namespace st
