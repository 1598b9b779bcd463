// `shardtrain train`: MPI (a single process without mpirun is a world of one), options (YAML +
// flags), the built-in corpus when --data is empty, then the parallel trainer. MPI comes first so
// that an error every rank meets alike (a bad flag) is printed once (launch/error_report.h); a
// world size the layout does not fit is refused naming the launch line that fits, and flags
// without effect in the layout get a note (launch/layout_check.h); an error propagates to main(),
// which prints one line naming the rank and aborts the job so no rank waits forever.
#include <mpi.h>

#include <cstdlib>
#include <iostream>

#include "comm/mpi_env.h"
#include "launch/build_info.h"
#include "launch/comm_env.h"
#include "launch/commands.h"
#include "launch/config.h"
#include "launch/corpus.h"
#include "launch/error_report.h"
#include "launch/gpu_env.h"
#include "launch/layout_check.h"
#include "launch/run_dir.h"
#include "launch/startup_watchdog.h"
#include "launch/stop_signals.h"
#include "launch/test_seams.h"
#include "runtime/common/startup_phase.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/setup/global_batch.h"
#include "runtime/train/parallel_training.h"

namespace st::launch {

namespace {

[[noreturn]] void usage_fail(const std::string& flag, const std::string& why) {
  throw UsageError("--" + flag + ": " + why);
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  if (OptionTable::wants_help(args)) {
    std::cout << train_usage();
    return 0;
  }
  // from here to the first step, every phase under --timeout-s (launch/startup_watchdog.h)
  start_startup_watchdog(args, runtime::TrainConfig{}.timeout_s);
  runtime::set_startup_hook(startup_watchdog_phase);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    comm::apply_mpi_defaults();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  startup_watchdog_phase("communicator set-up");
  prepare_error_agreement();
  std::vector<std::string> notes;
  runtime::TrainConfig cfg = parse_train_args(args, &notes);
  if (cfg.device == Device::cuda)  // the reason `shardtrain info` gives, not CUDA's error from a first query
    if (const std::string why = cuda_unusable(); !why.empty())
      throw UsageError("--device cuda: " + why + "; --device cpu runs on the CPU");
  cfg.comm_options = comm_options_from_env();
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  install_stop_signals(/*notice=*/rank == 0);  // SIGINT / SIGTERM: stop after a step (launch/stop_signals.h)
  check_job_ranks(cfg, world, args);  // before the communicators: names the launch line that fits
  // --global-batch: micro-batch and grad-accum for this layout's replicas (runtime/setup/global_batch.h)
  const int64_t replicas = cfg.dp > 0 ? cfg.dp : world / (cfg.tp * cfg.pp * cfg.cp);
  if (const std::string split = runtime::resolve_global_batch(cfg, replicas, usage_fail); !split.empty()) {
    cfg.validate(usage_fail);  // the derived grad-accum against the pipeline's rules
    notes.push_back(split);
  }
  for (const std::string& note : no_effect_notes(cfg, cfg.dp > 0 ? cfg.dp : world / (cfg.tp * cfg.pp)))
    notes.push_back(note);
  // --run-dir: its config.yaml, unless the run is about to be refused for another run's checkpoints
  if (rank == 0 && !cfg.run_dir.empty() &&
      (cfg.resume || cfg.overwrite_checkpoints || runtime::CheckpointDir(cfg.checkpoint_dir).complete_steps().empty()))
    write_run_config(cfg);
  if (rank == 0)
    for (const std::string& note : notes) std::cout << note << "\n";
  std::cout.flush();
  if (cfg.data.empty()) cfg.data = builtin_corpus_path();
  apply_gpu_environment();
  int rc = runtime::run_parallel_training(cfg, train_seams_from_environment());
  stop_startup_watchdog();  // one process never said start-up ended
  end_stop_grace();
  if (const auto stop = runtime::recorded_stop()) {  // every rank stopped after the same step
    if (rank == 0)
      std::cout << stop_line(*stop, args, world, cfg.device == Device::cuda && world > 1, !cfg.checkpoint_dir.empty())
                << std::endl;
    rc = stop_exit_code(stop->signal, world > 1 || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr);
  }
  release_error_agreement();
  MPI_Finalize();
  return rc;
}

}  // namespace st::launch
