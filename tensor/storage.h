// Storage: one contiguous allocation on one device, shared by a tensor and its views.
// CPU memory is 64-byte aligned (whole cache lines, AVX-512 loads). CUDA memory comes from the
// stream-aware caching allocator (tensor/cuda); in a CPU-only build asking for it throws.
#pragma once
#include <cstddef>
#include <memory>

#include "tensor/dtype.h"

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

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
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
size_t device_bytes_free();  // what tensors could still get on the current device: free + cached (0 without CUDA)
}  // namespace cuda

}  // namespace st
