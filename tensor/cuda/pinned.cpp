// PinnedBuffer on CUDA (see tensor/pinned.h): cudaHostAlloc'd blocks, copies with cudaMemcpyAsync
// on the current stream, one event per block as the fence of its last copy. A CUDA build on a
// machine without a visible device (CI, CPU-only ranks) gets plain aligned host memory, as the
// CPU-only build does: there is nothing to pin for and no device to copy from.
#include "tensor/pinned.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "tensor/cuda/runtime.h"
#include "tensor/storage.h"

namespace st::cuda {
namespace {
std::atomic<uint64_t> g_pinned_allocs{0};
std::atomic<size_t> g_pinned_bytes{0};
cudaEvent_t fence_of(void* f) { return static_cast<cudaEvent_t>(f); }
}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  ST_CHECK(bytes > 0, ValueError, "PinnedBuffer: zero bytes");
  if (!available()) {  // no device: plain host memory, fence_ stays null
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data_) ST_THROW(OutOfMemoryError, "host allocation of " << bytes << " bytes failed");
    g_pinned_allocs.fetch_add(1);
    g_pinned_bytes.fetch_add(bytes);
    return;
  }
  cudaError_t e = cudaHostAlloc(&data_, bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ST_THROW(OutOfMemoryError, "cudaHostAlloc of " << bytes << " page-locked bytes failed");
  }
  CHECK_CUDA(e);
  cudaEvent_t ev = nullptr;
  e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    cudaFreeHost(data_);
    CHECK_CUDA(e);
  }
  fence_ = ev;
  g_pinned_allocs.fetch_add(1);
  g_pinned_bytes.fetch_add(bytes);
}

PinnedBuffer::~PinnedBuffer() {
  g_pinned_bytes.fetch_sub(bytes_);
  if (!fence_) {  // plain host memory (no device)
    std::free(data_);
    return;
  }
  // A copy may still read or write the block: wait for it (errors ignored in a destructor; at
  // process exit the CUDA runtime may already be gone).
  cudaEventSynchronize(fence_of(fence_));
  cudaEventDestroy(fence_of(fence_));
  if (mark_) cudaEventDestroy(fence_of(mark_));
  if (copy_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
  cudaFreeHost(data_);
}

void PinnedBuffer::download_on_wait(const void* src, size_t bytes, size_t offset) {
  ST_CHECK(fence_, DeviceError, "PinnedBuffer: device-to-host copy, but no CUDA device is visible");
  ST_CHECK(offset + bytes <= bytes_, ValueError,
           "PinnedBuffer: copy of " << bytes << " bytes at " << offset << " into a block of " << bytes_);
  if (!copy_stream_) {
    cudaStream_t cs = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    copy_stream_ = cs;
    cudaEvent_t ev = nullptr;
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    mark_ = ev;
  }
  CHECK_CUDA(cudaGetDevice(&device_));
  CHECK_CUDA(cudaEventRecord(fence_of(mark_), current_stream()));  // what made src's bytes
  if (bytes > 0) deferred_.push_back({src, bytes, offset});
}

void PinnedBuffer::run_deferred() {
  std::vector<Deferred> pieces;
  pieces.swap(deferred_);
  CHECK_CUDA(cudaSetDevice(device_));  // this thread's device: the block's
  cudaStream_t cs = static_cast<cudaStream_t>(copy_stream_);
  CHECK_CUDA(cudaStreamWaitEvent(cs, fence_of(mark_), 0));
  if (pending_) CHECK_CUDA(cudaStreamWaitEvent(cs, fence_of(fence_), 0));  // the block's last copy
  size_t queued = 0;  // bytes queued since the last wait
  auto drain = [&] {  // at most one piece's bytes queued at a time
    CHECK_CUDA(cudaEventRecord(fence_of(fence_), cs));
    CHECK_CUDA(cudaEventSynchronize(fence_of(fence_)));
    queued = 0;
  };
  for (const Deferred& d : pieces)
    for (size_t done = 0; done < d.bytes;) {
      const size_t n = std::min(kDownloadPiece - queued, d.bytes - done);
      CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(data_) + d.offset + done, static_cast<const char*>(d.src) + done,
                                 n, cudaMemcpyDeviceToHost, cs));
      done += n;
      queued += n;
      if (queued == kDownloadPiece) drain();
    }
  if (queued > 0) drain();
  pending_ = false;
}

void PinnedBuffer::download_async(const void* src, size_t bytes, size_t offset) {
  ST_CHECK(fence_, DeviceError, "PinnedBuffer: device-to-host copy, but no CUDA device is visible");
  ST_CHECK(offset + bytes <= bytes_, ValueError,
           "PinnedBuffer: copy of " << bytes << " bytes at " << offset << " into a block of " << bytes_);
  cudaStream_t s = current_stream();
  // The last copy (possibly on another stream) must be done with the block before it is
  // overwritten: a device-side wait, no host stall.
  if (pending_) CHECK_CUDA(cudaStreamWaitEvent(s, fence_of(fence_), 0));
  CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaEventRecord(fence_of(fence_), s));
  pending_ = true;
}

void PinnedBuffer::upload_async(void* dst, size_t bytes, size_t offset) {
  ST_CHECK(fence_, DeviceError, "PinnedBuffer: host-to-device copy, but no CUDA device is visible");
  ST_CHECK(offset + bytes <= bytes_, ValueError,
           "PinnedBuffer: copy of " << bytes << " bytes at " << offset << " out of a block of " << bytes_);
  cudaStream_t s = current_stream();
  // The fence is re-recorded below; it must still cover an earlier copy on another stream.
  if (pending_) CHECK_CUDA(cudaStreamWaitEvent(s, fence_of(fence_), 0));
  CHECK_CUDA(cudaMemcpyAsync(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaEventRecord(fence_of(fence_), s));
  pending_ = true;
}

bool PinnedBuffer::query() {
  if (!deferred_.empty()) return false;
  if (!pending_) return true;
  const cudaError_t e = cudaEventQuery(fence_of(fence_));
  if (e == cudaErrorNotReady) return false;
  CHECK_CUDA(e);
  pending_ = false;
  return true;
}

void PinnedBuffer::wait() {
  if (!deferred_.empty()) run_deferred();
  if (!pending_) return;
  CHECK_CUDA(cudaEventSynchronize(fence_of(fence_)));
  pending_ = false;
}

uint64_t pinned_alloc_count() { return g_pinned_allocs.load(); }
size_t pinned_bytes_held() { return g_pinned_bytes.load(); }

}  // namespace st::cuda
