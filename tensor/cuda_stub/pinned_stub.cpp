// CPU-only build: PinnedBuffer is plain 64-byte-aligned host memory (nothing to pin without CUDA);
// copies to or from a device say clearly that there is no CUDA.
#include <atomic>
#include <cstdlib>

#include "tensor/error.h"
#include "tensor/pinned.h"

namespace st::cuda {
namespace {
std::atomic<uint64_t> g_allocs{0};
std::atomic<size_t> g_bytes{0};
[[noreturn]] void no_cuda(const char* what) {
  ST_THROW(DeviceError, what << ": this shardtrain was built without CUDA (CPU-only build)");
}
}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  ST_CHECK(bytes > 0, ValueError, "PinnedBuffer: zero bytes");
  data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!data_) ST_THROW(OutOfMemoryError, "host allocation of " << bytes << " bytes failed");
  g_allocs.fetch_add(1);
  g_bytes.fetch_add(bytes);
}
PinnedBuffer::~PinnedBuffer() {
  std::free(data_);
  g_bytes.fetch_sub(bytes_);
}
void PinnedBuffer::download_async(const void*, size_t, size_t) { no_cuda("device-to-host copy"); }
void PinnedBuffer::download_on_wait(const void*, size_t, size_t) { no_cuda("device-to-host copy"); }
void PinnedBuffer::run_deferred() {}
void PinnedBuffer::upload_async(void*, size_t, size_t) { no_cuda("host-to-device copy"); }
bool PinnedBuffer::query() { return true; }
void PinnedBuffer::wait() {}

uint64_t pinned_alloc_count() { return g_allocs.load(); }
size_t pinned_bytes_held() { return g_bytes.load(); }
void synchronize() { no_cuda("stream synchronisation"); }

}  // namespace st::cuda
