// Pipeline benchmark (a program, not a test): runs one pipeline stage per rank of a GPT for a few
// steps under GPipe and 1F1B and prints, per schedule, the measured bubble against the theory
// (p − 1)/(m + p − 1) and each stage's peak activation memory (bytes held above the step's
// start), and 1F1B with activation recompute (1f1b+rc).
//
//   mpirun -np 2 build/tests/bench/bench_pipeline [m] [layers] [d_model] [micro_batch] [seq_len]
//
// Bubble of a stage = time blocked in receives / step time; the table reports the mean over
// stages and stage 0's. Compute-bound stages (one core per rank) are needed for the theory to
// apply: on an oversubscribed machine the numbers measure the scheduler, not the pipeline.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi_env.h"
#include "comm/make_communicator.h"
#include "runtime/train/model_registry.h"
#include "runtime/train/pipeline_source.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/data/token_data.h"
#include "tensor/philox.h"

using namespace st;
using namespace st::runtime;

int main(int argc, char** argv) {
  int provided;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const int m = argc > 1 ? std::atoi(argv[1]) : 8;
  TrainConfig cfg;
  cfg.model = "gpt";
  cfg.layers = argc > 2 ? std::atoi(argv[2]) : 4;
  cfg.d_model = argc > 3 ? std::atoi(argv[3]) : 128;
  cfg.heads = 4;
  cfg.vocab = 256;
  cfg.micro_batch = argc > 4 ? std::atoi(argv[4]) : 4;
  cfg.seq_len = argc > 5 ? std::atoi(argv[5]) : 64;
  auto world = comm::make_communicator("mpi", std::chrono::seconds(600)).world;
  const int p = world->size(), rank = world->rank();
  const std::string data = "/tmp/bench_pipeline_tokens.bin";
  if (rank == 0) {
    std::vector<uint16_t> tok(200000);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<uint16_t>(philox4x32_10(9, i).x[0] % 256);
    write_token_file(data, tok);
  }
  world->barrier()->wait();
  auto tokens = std::make_shared<TokenData>(data);
  BatchLayout layout;
  layout.micro_batch = cfg.micro_batch;
  layout.grad_accum = m;
  layout.seq_len = cfg.seq_len;
  if (rank == 0)
    std::printf("pipeline p=%d m=%d | GPT layers %ld d %ld | micro-batch %ld x T %ld | theory bubble %.3f\n", p, m,
                static_cast<long>(cfg.layers), static_cast<long>(cfg.d_model), static_cast<long>(cfg.micro_batch),
                static_cast<long>(cfg.seq_len), (p - 1.0) / (m + p - 1.0));
  if (rank == 0) std::printf("%-7s %12s %12s %14s %18s\n", "sched", "step ms", "bubble(mean)", "bubble(stage0)", "peak act MiB(st0)");
  for (const std::string variant : {"gpipe", "1f1b", "1f1b+rc"}) {
    const bool recompute = variant == "1f1b+rc";
    const std::string sched = recompute ? "1f1b" : variant;
    const int layers = static_cast<int>(describe_model(model_entry(cfg), cfg.seq_len).layers.size());
    Partition part = partition_uniform(layers, p);
    auto stage = std::make_shared<StageModel>(build_model(cfg, {part.begin(rank), part.end(rank)}));
    stage->set_recompute(recompute);
    PipelineGradientSource src(stage, tokens, layout, Device::cpu, world, parse_enum<Schedule>(sched, "schedule"), true);
    ClearGrads no_sync(stage);
    const int steps = 4;
    double step_ms = 0, wait = 0, compute = 0;
    int64_t peak = 0;
    for (int s = 0; s < steps + 1; ++s) {
      world->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      src.compute_gradients(s, 1.0, no_sync);
      double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      stage->zero_grad(true);
      if (s == 0) continue;  // warm-up
      step_ms += dt;
      wait += src.stats().wait_ms;
      compute += src.stats().compute_ms;
      peak = std::max(peak, src.stats().peak_activation_bytes);
    }
    float mine[3] = {static_cast<float>(wait / (wait + compute)), static_cast<float>(step_ms / steps),
                     static_cast<float>(peak)};
    Tensor t = Tensor::from_vector(std::vector<float>{mine[0], mine[1], mine[2]}, {3});
    Tensor all = Tensor::empty({3 * p});
    world->all_gather(t, all)->wait();
    auto v = all.to_double();
    if (rank == 0) {
      double mean_bubble = 0, max_step = 0;
      for (int r = 0; r < p; ++r) {
        mean_bubble += v[3 * r] / p;
        max_step = std::max(max_step, v[3 * r + 1]);
      }
      std::printf("%-7s %12.1f %12.3f %14.3f %18.2f\n", variant.c_str(), max_step, mean_bubble, v[0], v[2] / (1 << 20));
    }
  }
  MPI_Finalize();
  return 0;
}
