// MPI_COMM_WORLD's rank, size and barrier for the tests that drive MPI directly (the runtime's
// multi-rank tests call run_parallel_training and compare across ranks themselves).
#pragma once
#include <mpi.h>

namespace st::testing {

inline int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
inline void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace st::testing
