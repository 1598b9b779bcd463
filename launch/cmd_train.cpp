// `shardtrain train`: MPI (a single process without mpirun is a world of one), options (YAML +
// flags), the built-in corpus when --data is empty, then the parallel trainer. MPI comes first so
// that an error every rank meets alike (a bad flag) is printed once (launch/error_report.h); an
// error propagates to main(), which prints one line naming the rank and aborts the job so no
// rank waits forever.
#include <mpi.h>

#include <iostream>

#include "comm/mpi_env.h"
#include "launch/comm_env.h"
#include "launch/commands.h"
#include "launch/config.h"
#include "launch/corpus.h"
#include "launch/error_report.h"
#include "launch/test_seams.h"
#include "runtime/train/parallel_training.h"

namespace st::launch {

int cmd_train(const std::vector<std::string>& args) {
  if (OptionTable::wants_help(args)) {
    std::cout << train_usage();
    return 0;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    comm::apply_mpi_defaults();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  prepare_error_agreement();
  runtime::TrainConfig cfg = parse_train_args(args);
  cfg.comm_options = comm_options_from_env();
  if (cfg.data.empty()) cfg.data = builtin_corpus_path();
  const int rc = runtime::run_parallel_training(cfg, train_seams_from_environment());
  release_error_agreement();
  MPI_Finalize();
  return rc;
}

}  // namespace st::launch
