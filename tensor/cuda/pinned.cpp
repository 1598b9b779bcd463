// PinnedBuffer on CUDA (see tensor/pinned.h): cudaHostAlloc'd blocks, copies with cudaMemcpyAsync
// on the current stream, one event per block as the fence of its last copy.
#include "tensor/pinned.h"

#include <atomic>

#include "tensor/cuda/runtime.h"

namespace st::cuda {
namespace {
std::atomic<uint64_t> g_pinned_allocs{0};
std::atomic<size_t> g_pinned_bytes{0};
cudaEvent_t fence_of(void* f) { return static_cast<cudaEvent_t>(f); }
}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  ST_CHECK(bytes > 0, ValueError, "PinnedBuffer: zero bytes");
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
  // A copy may still read or write the block: wait for it (errors ignored in a destructor; at
  // process exit the CUDA runtime may already be gone).
  cudaEventSynchronize(fence_of(fence_));
  cudaEventDestroy(fence_of(fence_));
  cudaFreeHost(data_);
  g_pinned_bytes.fetch_sub(bytes_);
}

void PinnedBuffer::download_async(const void* src, size_t bytes, size_t offset) {
  ST_CHECK(offset + bytes <= bytes_, ValueError,
           "PinnedBuffer: copy of " << bytes << " bytes at " << offset << " into a block of " << bytes_);
  cudaStream_t s = current_stream();
  CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaEventRecord(fence_of(fence_), s));
}

void PinnedBuffer::upload_async(void* dst, size_t bytes, size_t offset) {
  ST_CHECK(offset + bytes <= bytes_, ValueError,
           "PinnedBuffer: copy of " << bytes << " bytes at " << offset << " out of a block of " << bytes_);
  cudaStream_t s = current_stream();
  CHECK_CUDA(cudaMemcpyAsync(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaEventRecord(fence_of(fence_), s));
}

void PinnedBuffer::wait() const { CHECK_CUDA(cudaEventSynchronize(fence_of(fence_))); }

uint64_t pinned_alloc_count() { return g_pinned_allocs.load(); }
size_t pinned_bytes_held() { return g_pinned_bytes.load(); }

}  // namespace st::cuda
