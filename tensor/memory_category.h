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
//
// The cap (`--max-memory`): when set, an allocation that would take a device's bytes in use
// over it throws OutOfMemoryError before anything is allocated, naming the category and the
// layer being allocated for (a MemoryLayerScope: the runtime sets it where a layer runs its
// forward, and autograd where a node it recorded runs its backward), the size asked, the cap,
// what is in use by category, and the note the runtime registered (the planner's estimate for
// this layout). It lets one large device stand for a smaller one; the device's own free memory
// is a separate limit (the CUDA allocator's own OutOfMemoryError).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

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

// The layer this thread allocates for now ("" outside any scope), e.g. "blocks.3 forward".
const std::string& current_memory_layer();

// Sets this thread's layer for its lifetime (nests; restores the previous one).
class MemoryLayerScope {
 public:
  explicit MemoryLayerScope(std::string layer);
  ~MemoryLayerScope();
  MemoryLayerScope(const MemoryLayerScope&) = delete;
  MemoryLayerScope& operator=(const MemoryLayerScope&) = delete;

 private:
  std::string prev_;
};

// The process's cap on each device's bytes in use (0: none), and the note its error carries.
void set_memory_cap(size_t bytes, std::string note);
size_t memory_cap();
// Throws OutOfMemoryError when `bytes` more on `device` would exceed the cap (the allocators
// call it before allocating: tensor/storage.cpp on the CPU, tensor/cuda/allocator.cpp on CUDA).
void memory_cap_check(Device device, size_t bytes);

// Allocator bookkeeping (tensor/storage.cpp calls these).
void memory_account_alloc(Device device, MemoryCategory c, size_t bytes);
void memory_account_free(Device device, MemoryCategory c, size_t bytes);

}  // namespace st
