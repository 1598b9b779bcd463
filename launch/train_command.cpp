// `shardtrain train`: initialises MPI (a single process without mpirun is a world of one) and
// hands the validated options to the parallel trainer. An error propagates to main(), which
// prints one line naming the rank and aborts the job so no rank waits forever.
#include <mpi.h>

#include "comm/mpi_env.h"
#include "launch/commands.h"
#include "runtime/parallel_training.h"

namespace st::launch {

int train_command(const runtime::TrainConfig& cfg) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    comm::apply_mpi_defaults();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  const int rc = runtime::run_parallel_training(cfg);
  MPI_Finalize();
  return rc;
}

}  // namespace st::launch
