// What each rank's memory held during a run, and the table `shardtrain train` prints at the end:
// per rank the largest per-step peak of its parameters, gradients, optimizer state, activations
// and of all its tensors together (tensor/memory_category.h), and
// the process's peak resident set (VmHWM: everything the process touched — the allocator's bytes
// plus libraries, communication buffers, the token file's pages).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace st::runtime {

struct RankMemory {
  int64_t params = 0, grads = 0, optim = 0, act_peak = 0, peak = 0;  // bytes: largest per-step peak

  int64_t rss_peak = -1;                     // VmHWM in bytes; −1 where /proc/self/status has none
};

// VmHWM of this process from /proc/self/status, in bytes (−1 when unavailable).
int64_t process_peak_rss();

// Every rank's RankMemory, on every rank, by one all-gather over `world` (null: this rank's only).
std::vector<RankMemory> gather_rank_memory(const RankMemory& mine, comm::Communicator* world);

// "rank | params | grads | optim | act peak | peak | rss peak" rows in MiB, one per rank.
std::string memory_table(const std::vector<RankMemory>& ranks);

}  // namespace st::runtime
