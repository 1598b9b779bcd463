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
#include <vector>

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
  // Device `src` → data()[offset, offset + bytes), issued by the next wait() — on whichever host
  // thread calls it (a checkpoint's writer thread) — on the block's own copy stream, after what
  // the current stream had queued at this call (what made src's bytes), one kDownloadPiece at a
  // time, each waited for before the next is queued. Nothing is queued now: the current stream
  // goes on at once, and since a copy engine takes copies in the order they were queued, the
  // training's own small copies never wait behind more than one piece (a whole 1.5 GB download
  // queued at once held the next step's token upload and report read: +11 to +19 ms on the step
  // after an asynchronous save, GPT-2 124M on an H100). `src` must hold its bytes, unchanged and
  // allocated, until wait() returned (a copy made for it, or a block nothing writes before then:
  // runtime/parallel/state_sharding.h's HostStaging). query() is false until a wait() has run the
  // copy. Several calls before a wait() add pieces, issued in their order (up to kDownloadPiece
  // bytes queued at a time), all after the current stream's point at the last call.
  void download_on_wait(const void* src, size_t bytes, size_t offset = 0);
  // 32 MiB: ~0.6 ms over a PCIe 5 x16 link, the longest another stream's copy waits for one.
  static constexpr size_t kDownloadPiece = size_t{32} << 20;
  // data()[offset, offset + bytes) → device `dst` on the current stream, asynchronous; records the
  // fence after the copy (the block must not be written until it has passed).
  void upload_async(void* dst, size_t bytes, size_t offset = 0);
  // True once the last copy passed (no wait; no CUDA call when none is pending): the bytes of a
  // download are in the block, an upload has read it. False while a download_on_wait waits.
  bool query();
  // The host waits until the last copy passed (running a download_on_wait first); no CUDA call
  // when none is pending. Call it (or see query() true) before the host or MPI reads a download
  // or writes the block.
  void wait();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void* fence_ = nullptr;  // cudaEvent_t, created with the block (null in CPU builds)
  bool pending_ = false;   // a copy recorded on fence_ may still read or write the block
  void* copy_stream_ = nullptr;  // cudaStream_t of download_on_wait (null until used)
  void* mark_ = nullptr;         // cudaEvent_t: the current stream's point the copy stream waits for
  int device_ = 0;               // the device the block's copies run on (set in wait()'s thread)
  // the download_on_wait pieces not issued yet
  struct Deferred {
    const void* src;
    size_t bytes, offset;
  };
  std::vector<Deferred> deferred_;
  void run_deferred();
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
