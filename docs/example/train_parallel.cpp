// The whole distributed trainer from a program (docs/library.md): MPI_Init, a TrainConfig (the
// options of `shardtrain train`) with a token file this program writes, run_parallel_training
// over the DP × TP × PP grid of MPI_COMM_WORLD, MPI_Finalize. Run it under mpirun like the CLI:
//   mpirun -np 2 ./train_parallel [WORK_DIR]         (data parallel over the 2 ranks)
// Exits 0 when rank 0's metrics show the loss more than halved.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mpi_env.h"
#include "runtime/data/token_data.h"
#include "runtime/observe/metrics.h"
#include "runtime/train/parallel_training.h"
#include "runtime/setup/train_config.h"

int main(int argc, char** argv) {
  using namespace st;
  comm::apply_mpi_defaults();  // MPI settings the runtime relies on (comm/mpi_env.h), before MPI_Init
  int provided = 0, rank = 0, ok = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string dir = argc > 1 ? argv[1] : "/tmp/shardtrain_example";

  runtime::TrainConfig cfg;
  cfg.model = "gpt";
  cfg.layers = 2;
  cfg.d_model = 32;
  cfg.heads = 2;
  cfg.vocab = 256;
  cfg.seq_len = 16;
  cfg.micro_batch = 4;  // per replica: the global batch is 4 × the world size
  cfg.steps = 30;
  cfg.lr = 1e-2;
  cfg.data = dir + "/tokens.bin";
  cfg.metrics = dir + "/metrics.jsonl";
  cfg.log_every = 10;
  if (rank == 0) {  // bytes of a repeated sentence, as the one-process example (tiny_gpt.cpp)
    std::filesystem::create_directories(dir);
    std::filesystem::remove(cfg.metrics);
    const std::string text = "hello shardtrain! ";
    std::vector<uint16_t> tokens;
    for (int i = 0; i < 400; ++i) tokens.push_back(static_cast<unsigned char>(text[i % text.size()]));
    runtime::write_token_file(cfg.data, tokens);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the token file exists before any rank opens it

  try {
    runtime::run_parallel_training(cfg);
    if (rank == 0) {
      const auto lines = runtime::read_metrics(cfg.metrics);
      const double first = lines.front()["loss"].get<double>(), last = lines.back()["loss"].get<double>();
      std::printf("%zu steps, loss %.4f -> %.4f\n", lines.size(), first, last);
      ok = lines.size() == static_cast<size_t>(cfg.steps) && last < 0.5 * first;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] train_parallel: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // the others may wait in a collective
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return ok ? 0 : 1;
}
