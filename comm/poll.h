// The one polling loop behind every wait with a deadline (Work::wait, mpi_wait).
#pragma once
#include <chrono>
#include <thread>

namespace st::comm {

// Calls done() until it returns true (→ true) or `deadline` passes (→ false). The first
// millisecond spins (most operations finish there, and a yield can cost a time slice); after that
// the core is yielded between polls, so oversubscribed ranks share cores. It never sleeps: MPI's
// nonblocking collectives progress only inside MPI calls, and polling every 100 µs made a 256 MB
// all-reduce of two ranks a third slower (docs/PERFORMANCE.md, comm on the GPU).
template <class Done>
bool poll_until(std::chrono::steady_clock::time_point deadline, Done&& done) {
  using clock = std::chrono::steady_clock;
  const auto spin_until = clock::now() + std::chrono::milliseconds(1);
  for (;;) {
    if (done()) return true;
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (now >= spin_until) std::this_thread::yield();
  }
}

}  // namespace st::comm
