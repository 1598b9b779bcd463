// Where MPI reads and writes each tensor of an operation, and the f16 / bf16 widening.
//
// CPU tensors are used in place. CUDA tensors either go to MPI as device pointers (CUDA-aware
// MPI, comm/mpi/cuda_aware.h) or are staged through page-locked blocks of the communicator's
// StagingPool: device → host with cudaMemcpyAsync on the current stream, asynchronous, the
// block's fence recorded after it; the operation is posted to MPI once every block it uses has
// passed its fence (staged_ready(); comm/mpi/post_queue.h) — no host wait at launch. Host →
// device after completion, asynchronous on the current stream (later work on that stream sees
// the values; the block's next user is ordered after that copy: a download on the device, MPI or
// a host write by the fence). Per call: the two copies and one event record each, no host wait.
// No allocation once the pool has warmed up.
//
// f16 / bf16 reductions run in f32 on the host (widened before the call, rounded once after it),
// on both paths: the accuracy the issue asks for, with MPI's built-in MPI_SUM / MPI_MAX.
#pragma once
#include <cstddef>
#include <vector>

#include "comm/mpi/staging_pool.h"
#include "tensor/tensor.h"

namespace st::comm::mpi {

// One tensor's memory as MPI sees it.
struct Staged {
  void* ptr = nullptr;        // what MPI reads or writes
  StagingPool::Lease block;   // set when ptr is a staging block (ptr = block->data())
  bool device = false;        // ptr is the CUDA tensor's own memory (CUDA-aware path)
};

// Which memory may serve a tensor.
enum class Place {
  any,       // the tensor's own memory where MPI can use it (CPU; CUDA with CUDA-aware MPI)
  host,      // host memory: the tensor's own when on the CPU, else a staging block
  separate,  // always a staging block (the tensor's memory aliases another buffer of the call)
};

class HostStage {
 public:
  explicit HostStage(bool cuda_aware) : aware_(cuda_aware) {}

  // `t`'s values, readable by MPI once ready() returned and staged_ready() says so (a staging
  // block's download is then done).
  Staged input(const Tensor& t, Place place);
  // `whole`'s memory (Place::any) holding `chunk`'s values at byte `offset` — an in-place
  // all-gather, where `chunk` is already that part of `whole`; staged, only the chunk is copied.
  Staged input_chunk(const Tensor& whole, const Tensor& chunk, size_t offset);
  // Memory of t's size that MPI may write once staged_ready() (a staging block is uninitialised).
  Staged output(const Tensor& t, Place place);
  // A host block of at least `bytes` that the host may write once staged_ready() (f32 widenings).
  Staged scratch(size_t bytes);
  bool cuda_aware() const { return aware_; }
  const StagingPool& pool() const { return pool_; }

 private:
  bool direct(const Tensor& t, Place place) const {
    return place != Place::separate && (!t.is_cuda() || (aware_ && place == Place::any));
  }
  // A block whose last copy may still be running (see StagingPool::acquire).
  Staged lease(size_t bytes);
  bool aware_;
  StagingPool pool_;
};

// Before MPI sees `s`: when MPI reads or writes the CUDA tensor's own memory, waits for the
// current stream (queued kernels may still touch it). Staging blocks: see staged_ready().
void ready(const Staged& s);
// True once every staging block of `staged` passed its fence (downloads in, earlier uploads out
// of the block); no wait. Then MPI and the host may use them.
bool staged_ready(const std::vector<Staged>& staged);
// After MPI wrote `s`: its values into `dst` (upload or memcpy; nothing when s is dst's memory).
void writeback(const Staged& s, const Tensor& dst);
// In place: t (n) f32 /= divisor where MPI left the values (`s`: t's memory or its block).
void divide(const Staged& s, const Tensor& t, double divisor);

bool is_half(DType t);  // f16 or bf16
// n f16 / bf16 values (`dtype`) at `src` → n f32 at `dst`, exact.
void widen_f32(const void* src, DType dtype, float* dst, size_t n);
// n f32 at `src`, / divisor → n f16 / bf16 (`dtype`) at `dst`, rounded to nearest even once.
void narrow_from_f32(const float* src, void* dst, DType dtype, size_t n, double divisor);

}  // namespace st::comm::mpi
