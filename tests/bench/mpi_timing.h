// Timing helpers shared by the MPI benchmarks (bench_comm, bench_comm_gpu): wall-clock seconds,
// the slowest rank's time per call, best-of-rounds with the methods rotated so that drift of the
// machine hits all of them alike, and a human size ("4 KB", "16 MB").
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace st::bench {

constexpr int kRounds = 5;

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of `fn` (slowest rank), after a barrier.
inline double time_calls(int iters, const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  for (int i = 0; i < iters; ++i) fn();
  double dt = (now_s() - t0) / iters, worst = 0;
  MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// Best seconds per call of each method over kRounds rounds, after one warm-up call of each.
inline std::vector<double> best_of(int iters, const std::vector<std::function<void()>>& methods) {
  std::vector<double> best(methods.size(), 1e30);
  for (auto& m : methods) m();  // warm-up (and pool / cache fill)
  for (int round = 0; round < kRounds; ++round)
    for (size_t j = 0; j < methods.size(); ++j) {
      size_t k = (j + round) % methods.size();
      best[k] = std::min(best[k], time_calls(iters, methods[k]));
    }
  return best;
}

inline std::string human(size_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%zu MB", bytes >> 20);
  else
    std::snprintf(buf, sizeof buf, "%zu KB", bytes >> 10);
  return buf;
}

}  // namespace st::bench
