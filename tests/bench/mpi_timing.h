// Helpers shared by the MPI benchmarks (bench_comm, bench_comm_gpu): MPI start-up with the
// backend's defaults and the --max-mb flag, wall-clock seconds, the slowest rank's time per call,
// best-of-rounds with the methods rotated so that drift of the machine hits all of them alike, and
// a human size ("4 KB", "16 MB").
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_env.h"

namespace st::bench {

constexpr int kRounds = 5;

struct BenchMpi {
  int rank = 0, size = 0;
  size_t max_mb = 256;  // --max-mb N: the largest message
};

// MPI_Init_thread with the MPI backend's defaults (comm/mpi_env.h), this rank, the world size and
// the --max-mb flag.
inline BenchMpi bench_mpi_init(int& argc, char**& argv) {
  int provided = 0;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  BenchMpi b;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--max-mb") == 0) b.max_mb = std::stoul(argv[i + 1]);
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  return b;
}

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
