// StagingPool: the host blocks that one MPI communicator stages CUDA tensors (and f32 widenings
// of f16 / bf16 values) through. Blocks are page-locked (st::cuda::PinnedBuffer; plain host
// memory in CPU-only builds), leased to one operation at a time and returned when the lease is
// dropped — when the operation's Work finished, or never if it was abandoned after a timeout (MPI
// may still touch it). Blocks are powers of two (≥ 64 KiB); a request takes the smallest free
// block that fits and is at most 4x its rounded size, else a new one is allocated. The pool only
// grows: in a steady state (the same sizes every step) it allocates nothing, and it holds about
// the peak of concurrently leased bytes (e.g. the DP buckets in flight at once), rounded up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/pinned.h"

namespace st::comm::mpi {

class StagingPool {
 public:
  using Lease = std::shared_ptr<cuda::PinnedBuffer>;

  StagingPool();
  // A block of at least `bytes`. Its last copy may still be running (no host wait here):
  // PinnedBuffer::download_async orders itself after it on the device, and whoever writes the
  // block from the host or through MPI first sees query() true (or calls wait()). The block goes back to the pool when
  // the last copy of the Lease is dropped (even after the pool is destroyed: then it is freed).
  Lease acquire(size_t bytes);

  uint64_t allocations() const;  // blocks this pool allocated so far (flat in the steady state)
  size_t bytes_held() const;     // bytes of all its blocks, leased or free

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace st::comm::mpi
