// The CUDA side of the tensor core, for code that is compiled only with CUDA (tensor/cuda,
// ops/cuda, comm/nccl): checks, the current stream, events, the device guard and the caching
// allocator's statistics. CPU-only builds never include this header.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tensor/error.h"

namespace st::cuda {

inline bool cuda_ok(cudaError_t e) { return e == cudaSuccess; }
inline const char* cuda_describe(cudaError_t e) { return cudaGetErrorString(e); }
#define CHECK_CUDA(expr) ST_CHECK_GEN(expr, ::st::cuda::cuda_ok, ::st::cuda::cuda_describe, ::st::CudaError)
// After a kernel launch: reports launch-configuration errors without synchronising.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// The stream that ops of this thread enqueue on (default: a per-device stream created at first
// use, never the legacy default stream).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t s);
class StreamGuard {  // sets the current stream for a scope
 public:
  explicit StreamGuard(cudaStream_t s);
  ~StreamGuard();

 private:
  cudaStream_t prev_;
};

int device_count();
int current_device();
void set_device(int d);
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();

 private:
  int prev_;
};

// Caching-allocator statistics (bytes handed out to tensors; peak since start or reset).
size_t bytes_in_use();
size_t bytes_peak();
void reset_peak();
size_t bytes_cached();      // held in the cache, free for reuse on their stream
uint64_t malloc_count();    // cudaMalloc calls so far (flat in the steady state)
void empty_cache();         // synchronises the device, then returns cached blocks to CUDA
// CUDA graphs (tensor/graph.h): this thread's allocations come from private pool `pool` (0: the
// ordinary cache) until set back; retire_pool hands a destroyed graph's blocks to the ordinary cache.
void set_allocation_pool(uint64_t pool);
uint64_t allocation_pool();
void retire_pool(uint64_t pool);
void synchronize();  // the current stream; for benchmarks and tests, never inside ops

}  // namespace st::cuda
