// PinnedBuffer: one page-locked host block (cudaHostAlloc) for staging device data through the
// host at full copy bandwidth. Both copies are asynchronous on the current stream and record the
// block's fence event after them: a download (device → block) has its bytes in the block once the
// fence passed (query() says so without waiting, wait() waits on the host), an upload (block →
// device) may read the block until then. A copy is ordered on the device after the block's
// previous one (no host stall). One event record per copy. CPU-only builds (tensor/cuda_stub) back it with plain 64-byte-aligned host memory; there
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

  // Device `src` → data()[offset, offset + bytes) on the current stream (after everything queued
  // on it before), asynchronous, ordered on the device after the block's previous copy; records
  // the fence: the bytes are in the block once it passed (query() or wait()).
  void download_async(const void* src, size_t bytes, size_t offset = 0);
  // The same copy on the block's own copy stream (made at first use), after everything queued on
  // the current stream so far: the current stream goes on at once, so the copy overlaps the work
  // queued after it. `src` must hold its bytes, unchanged and allocated, until the fence passed
  // (a copy made for it: runtime/parallel/state_sharding.h's HostStaging). Copied in pieces of
  // kDownloadPiece bytes, so device-to-host copies of other streams are not held behind all of it.
  void download_async_behind(const void* src, size_t bytes, size_t offset = 0);
  // 32 MiB: ~0.6 ms over a PCIe 5 x16 link, the longest another stream's small copy waits;
  // a gigabyte is ~50 pieces (a few microseconds of host time each at the step boundary).
  static constexpr size_t kDownloadPiece = size_t{32} << 20;
  // data()[offset, offset + bytes) → device `dst` on the current stream, asynchronous; records the
  // fence after the copy (the block must not be written until it has passed).
  void upload_async(void* dst, size_t bytes, size_t offset = 0);
  // True once the last copy passed (no wait; no CUDA call when none is pending): the bytes of a
  // download are in the block, an upload has read it.
  bool query();
  // The host waits until the last copy passed; no CUDA call when none is pending. Call it (or see
  // query() true) before the host or MPI reads a download or writes the block.
  void wait();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void* fence_ = nullptr;  // cudaEvent_t, created with the block (null in CPU builds)
  bool pending_ = false;   // a copy recorded on fence_ may still read or write the block
  void* copy_stream_ = nullptr;  // cudaStream_t of download_async_behind (null until used)
  void* mark_ = nullptr;         // cudaEvent_t: the current stream's point the copy stream waits for
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
