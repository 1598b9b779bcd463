// Storage: one contiguous allocation on one device, shared by a tensor and its views.
// CPU memory is 64-byte aligned (whole cache lines, AVX-512 loads). CUDA memory comes from the
// stream-aware caching allocator (tensor/cuda); in a CPU-only build asking for it throws.
// Each storage counts its bytes in the memory category current at its allocation
// (tensor/memory_category.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensor/dtype.h"
#include "tensor/memory_category.h"

namespace st {

class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  void set_category(MemoryCategory c);  // moves its bytes to category c
  // ZeRO-3's gathered parameters (runtime/parallel/zero3.h): release() frees the bytes but keeps
  // the object (every tensor and view over it, autograd's saved ones included, stays bound to
  // it); reallocate() takes `bytes()` again in the same category (the cap applies). Reading a
  // released storage's data is the caller's error; both are no-ops when already in that state.
  void release();
  void reallocate();
  bool released() const { return data_ == nullptr && bytes_ > 0; }
  // While a DeferAllocation is alive on this thread, new storages are made released: the object,
  // its size and device exist, its bytes do not until reallocate() (or a tensor is re-pointed at
  // other storage). ZeRO-3 builds its model so (runtime/parallel/zero3.h): names, shapes and the
  // module tree without the full model's bytes. Tensor::full() leaves such a storage unwritten.
  class DeferAllocation {
   public:
    DeferAllocation();
    ~DeferAllocation();
    DeferAllocation(const DeferAllocation&) = delete;
    DeferAllocation& operator=(const DeferAllocation&) = delete;

   private:
    bool prev_;
  };

 private:
  void allocate();
  void deallocate();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
  MemoryCategory category_ = MemoryCategory::other;
};

// Bytes currently held / peak since start (CPU allocations only; CUDA reports its own).
size_t cpu_bytes_in_use();
size_t cpu_bytes_peak();

// Device allocator hooks implemented by tensor/cuda (or the stub in CPU-only builds).
namespace cuda {
void* device_alloc(size_t bytes);
void device_free(void* p, size_t bytes);
bool available();  // built with CUDA and a device is visible
size_t device_bytes_peak();  // the caching allocator's peak bytes handed to tensors (0 without CUDA)
// The current device as CUDA describes it (nullopt in a CPU-only build or without a device).
struct DeviceProperties {
  std::string name;           // "NVIDIA H200"
  int major = 0, minor = 0;   // compute capability
  int sm_count = 0;
  int64_t clock_khz = 0;      // the SMs' peak clock (cudaDevAttrClockRate)
  size_t total_bytes = 0;     // device memory
};
std::optional<DeviceProperties> device_properties();
size_t device_bytes_free();  // what tensors could still get on the current device: free + cached (0 without CUDA)
void release_cached_blocks();  // the allocator's cached (unused) blocks back to CUDA (nothing without CUDA)
}  // namespace cuda

}  // namespace st
