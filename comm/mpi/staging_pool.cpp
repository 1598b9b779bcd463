// StagingPool (see staging_pool.h): a best-fit free list of PinnedBuffers behind a mutex.
#include "comm/mpi/staging_pool.h"

#include <bit>
#include <algorithm>
#include <map>
#include <mutex>

namespace st::comm::mpi {

struct StagingPool::State {
  std::mutex mu;
  std::multimap<size_t, std::unique_ptr<cuda::PinnedBuffer>> free;  // by block size
  uint64_t allocations = 0;
  size_t bytes = 0;
};

StagingPool::StagingPool() : s_(std::make_shared<State>()) {}

StagingPool::Lease StagingPool::acquire(size_t bytes) {
  constexpr size_t kMinBlock = size_t(64) << 10;
  const size_t want = std::bit_ceil(std::max(bytes, kMinBlock));
  std::unique_ptr<cuda::PinnedBuffer> block;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    // Smallest free block that fits, but not one 4x too big: small requests leave big blocks to
    // the big requests they were made for.
    auto it = s_->free.lower_bound(want);
    if (it != s_->free.end() && it->first <= 4 * want) {
      block = std::move(it->second);
      s_->free.erase(it);
    }
  }
  if (!block) {
    block = std::make_unique<cuda::PinnedBuffer>(want);
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->allocations++;
    s_->bytes += block->bytes();
  }
  std::shared_ptr<State> state = s_;
  return Lease(block.release(), [state](cuda::PinnedBuffer* b) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->free.emplace(b->bytes(), std::unique_ptr<cuda::PinnedBuffer>(b));
  });
}

uint64_t StagingPool::allocations() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->allocations;
}

size_t StagingPool::bytes_held() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->bytes;
}

}  // namespace st::comm::mpi
