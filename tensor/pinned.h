// PinnedBuffer: one page-locked host block (cudaHostAlloc) for staging device data through the
// host at full copy bandwidth. A download (device → block) returns with the bytes in the block;
// an upload (block → device) is asynchronous and records a fence event, so that the block's next
// user can wait for it: a download on the device (no host stall), the host with wait(). Beyond
// the two copies and the host wait that staging needs anyway, that is one event record per round
// trip. CPU-only builds (tensor/cuda_stub) back it with plain 64-byte-aligned host memory; there
// the copy methods throw DeviceError (no CUDA tensor exists to copy from). Included by code
// compiled in every build (no CUDA headers).
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

  // Device `src` → data()[offset, offset + bytes) on the current stream, ordered on the device
  // after a pending upload; returns once the bytes are in the block (the host waits for the
  // current stream: everything queued on it before, then the copy).
  void download(const void* src, size_t bytes, size_t offset = 0);
  // data()[offset, offset + bytes) → device `dst` on the current stream, asynchronous; records the
  // fence after the copy (the block must not be written until it has passed).
  void upload_async(void* dst, size_t bytes, size_t offset = 0);
  // The host waits until the last upload has read the block; no CUDA call when none is pending.
  // Call it before the host or MPI writes the block.
  void wait();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void* fence_ = nullptr;  // cudaEvent_t, created with the block (null in CPU builds)
  bool pending_ = false;   // an upload recorded on fence_ may still be reading the block
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
