// Stream-aware caching allocator behind Storage on the GPU.
//
// A block belongs to the stream that was current when it was first handed out. Freed blocks go
// back to the cache of (device, stream, size class) and are reused only for requests on that same
// stream, so stream order alone makes reuse safe (no events, no host sync). Size classes: 512 B
// granules below 1 MiB, 2 MiB granules above, so that the steady state of a training step (the
// same shapes every step) is served from the cache with no cudaMalloc/cudaFree at all.
// When cudaMalloc fails the cache is released and the call retried once; a second failure throws
// OutOfMemoryError naming the bytes asked and the bytes free on the device. Before any of this,
// the process's cap (`--max-memory`, tensor/memory_category.h) is checked against the tensors'
// bytes in use, so one large GPU can stand for a smaller one.
//
// Private pools (CUDA graphs, tensor/graph.h): while a thread captures a graph, its allocations
// are keyed by the graph's pool id, so a block freed during the capture is reused only by later
// allocations of the same capture (the graph's nodes run in capture order on one stream) and
// never by ordinary allocations: the addresses baked into the graph stay the graph's until it is
// destroyed (retire_pool), when its blocks join the ordinary cache. Releasing the cache (on a
// failed cudaMalloc) leaves live pools' blocks alone.
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tensor/cuda/runtime.h"
#include "tensor/storage.h"

namespace st::cuda {
namespace {

struct Key {
  int device;
  cudaStream_t stream;
  size_t size;
  uint64_t pool;  // 0: the ordinary cache; else a graph's private pool
  bool operator==(const Key& o) const {
    return device == o.device && stream == o.stream && size == o.size && pool == o.pool;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<size_t>()(k.size) ^ (std::hash<const void*>()(k.stream) * 31) ^
           (static_cast<size_t>(k.device) << 56) ^ (std::hash<uint64_t>()(k.pool) * 131);
  }
};
thread_local uint64_t t_pool = 0;  // the pool this thread's allocations come from (0: ordinary)
struct Block {
  Key key;
  size_t requested;
};

size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSplit = 1u << 20;
  size_t g = bytes < kSplit ? kSmall : kLarge;
  return (bytes + g - 1) / g * g;
}

class CachingAllocator {
 public:
  void* alloc(size_t bytes) {
    int device = current_device();
    Key key{device, current_stream(), size_class(bytes), t_pool};
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    auto it = cache_.find(key);
    if (it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= key.size;
    } else {
      p = raw_malloc(key.size, bytes);
    }
    live_[p] = Block{key, bytes};
    in_use_ += bytes;
    if (in_use_ > peak_) peak_ = in_use_;
    return p;
  }

  void free(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: nothing to give back
    in_use_ -= it->second.requested;
    Key key = it->second.key;
    if (key.pool != 0 && retired_.count(key.pool)) key.pool = 0;  // its graph is gone
    cache_[key].push_back(p);
    cached_bytes_ += it->second.key.size;
    live_.erase(it);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

  // A destroyed graph's pool: its cached blocks join the ordinary cache, its live ones do when freed.
  void retire_pool(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mu_);
    retired_.insert(pool);
    std::vector<Key> keys;
    for (auto& [key, blocks] : cache_)
      if (key.pool == pool && !blocks.empty()) keys.push_back(key);
    for (Key key : keys) {
      std::vector<void*> blocks = std::move(cache_[key]);
      cache_.erase(key);
      key.pool = 0;
      auto& dst = cache_[key];
      dst.insert(dst.end(), blocks.begin(), blocks.end());
    }
  }

  size_t in_use() const { std::lock_guard<std::mutex> l(mu_); return in_use_; }
  size_t peak() const { std::lock_guard<std::mutex> l(mu_); return peak_; }
  void reset_peak() { std::lock_guard<std::mutex> l(mu_); peak_ = in_use_; }
  size_t cached() const { std::lock_guard<std::mutex> l(mu_); return cached_bytes_; }
  uint64_t mallocs() const { std::lock_guard<std::mutex> l(mu_); return mallocs_; }

 private:
  void* raw_malloc(size_t rounded, size_t asked) {
    // cudaMalloc is one of the calls a thread-local stream capture refuses ("operation not permitted
    // when stream is capturing"): this thread's capture mode is relaxed around it, and restored.
    // It enqueues nothing, so the graph being captured is unchanged; a capture's blocks belong to
    // its pool for the graph's lifetime (retire_pool), so replays find them where they were.
    struct RelaxedCapture {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
      ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    } relaxed;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, rounded);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cache_locked();
      e = cudaMalloc(&p, rounded);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      ST_THROW(OutOfMemoryError, "CUDA out of memory: asked for " << asked << " bytes (" << rounded
                                  << " rounded), " << free_b << " bytes free of " << total_b << " on device "
                                  << current_device() << "; " << in_use_ << " bytes in use by tensors");
    }
    CHECK_CUDA(e);
    ++mallocs_;
    return p;
  }

  void release_cache_locked() {
    bool synced = false;
    for (auto& [key, blocks] : cache_) {
      if (blocks.empty() || key.pool != 0) continue;  // a live graph's blocks stay its own
      if (!synced) {  // blocks may still be read by queued kernels of their stream
        cudaDeviceSynchronize();
        synced = true;
      }
      for (void* p : blocks) cudaFree(p);
      cached_bytes_ -= key.size * blocks.size();
      blocks.clear();
    }
  }

  mutable std::mutex mu_;
  std::unordered_map<Key, std::vector<void*>, KeyHash> cache_;
  std::unordered_map<void*, Block> live_;
  std::unordered_set<uint64_t> retired_;
  size_t in_use_ = 0, peak_ = 0, cached_bytes_ = 0;
  uint64_t mallocs_ = 0;
};

// Leaked on purpose: tensors held by other statics are freed after any static allocator would be.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void* device_alloc(size_t bytes) {
  // A CUDA build on a machine without a usable GPU: a clear DeviceError, as in a CPU-only build.
  static const bool have_device = available();
  if (!have_device)
    ST_THROW(DeviceError, "CUDA allocation of " << bytes << " bytes: no CUDA device is available on this machine");
  memory_cap_check(Device::cuda, bytes);
  return allocator().alloc(bytes);
}
void device_free(void* p, size_t) { allocator().free(p); }

size_t bytes_in_use() { return allocator().in_use(); }
size_t bytes_peak() { return allocator().peak(); }
size_t device_bytes_peak() { return allocator().peak(); }
size_t device_bytes_free() {
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return free_b + allocator().cached();
}
void reset_peak() { allocator().reset_peak(); }
size_t bytes_cached() { return allocator().cached(); }
uint64_t malloc_count() { return allocator().mallocs(); }
void empty_cache() { allocator().empty_cache(); }
void release_cached_blocks() { allocator().empty_cache(); }
void set_allocation_pool(uint64_t pool) { t_pool = pool; }
uint64_t allocation_pool() { return t_pool; }
void retire_pool(uint64_t pool) { allocator().retire_pool(pool); }

}  // namespace st::cuda
