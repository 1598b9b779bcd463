// PinnedBuffer: one page-locked host block (cudaHostAlloc) for staging device data through the
// host at full copy bandwidth, with asynchronous copies on the current stream and a fence event
// so that whoever reuses the block can wait for its last copy. CPU-only builds (tensor/cuda_stub)
// back it with plain 64-byte-aligned host memory; there the copy methods throw DeviceError (no
// CUDA tensor exists to copy from). Included by code compiled in every build (no CUDA headers).
#pragma once
#include <cstddef>
#include <cstdint>

namespace st::cuda {

class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes);  // bytes > 0; throws OutOfMemoryError / CudaError
  ~PinnedBuffer();                      // waits for the fence, then frees
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  // Enqueue on the current stream and record the fence after the copy (no host wait):
  // device `src` → data()[offset, offset + bytes) and data()[offset, offset + bytes) → device `dst`.
  void download_async(const void* src, size_t bytes, size_t offset = 0);
  void upload_async(void* dst, size_t bytes, size_t offset = 0);
  // The host waits until the last copy recorded on this block has finished (no-op if none).
  void wait() const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void* fence_ = nullptr;  // cudaEvent_t, created with the block (null in CPU builds)
};

// Page-locked blocks allocated by PinnedBuffer since the process started (for tests: a staging
// pool must stop allocating in the steady state) and bytes of them currently held.
uint64_t pinned_alloc_count();
size_t pinned_bytes_held();

// The host waits for the current stream (tensor/cuda/runtime.h declares it too; repeated here for
// code compiled in every build, e.g. before a CUDA-aware MPI reads device memory that queued
// kernels write). Throws DeviceError in CPU-only builds.
void synchronize();

}  // namespace st::cuda
