// Pipeline benchmark (a program, not a test): runs one pipeline stage per rank of a GPT for a few
// steps under GPipe, 1F1B, 1F1B with activation recompute (1f1b+rc) and interleaved 1F1B with v
// chunks per stage, and prints per schedule the measured bubble against the theory, and stage
// 0's peak activation memory (bytes held above the step's start).
//
//   mpirun -np 2 build/tests/bench/bench_pipeline [m] [layers] [d_model] [micro_batch] [seq_len] [v]
//
// A stage's wait = time blocked in point-to-point groups, compute = forward + backward time. Two
// measures, averaged over the stages: wait / (wait + compute), whose theory is (p − 1)/(m + p − 1)
// for GPipe and 1F1B and (p − 1)/(v·m + p − 1) interleaved, and wait / compute, (p − 1)/m and
// (p − 1)/(v·m) (Narayanan et al. 2021). Compute-bound stages (one core per rank) are needed for
// the theory to apply: on an oversubscribed machine the numbers measure the scheduler, not the
// pipeline. Layers are cut into p (or p·v) pieces balancing parameter bytes (--partition params).
// Interleaved runs only when m is a multiple of p and the model has p·v layers or more.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi_env.h"
#include "comm/make_communicator.h"
#include "runtime/setup/model_registry.h"
#include "ops/step_state.h"
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
  const int v = argc > 6 ? std::atoi(argv[6]) : 2;
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
    std::printf("pipeline p=%d m=%d | GPT layers %ld d %ld | micro-batch %ld x T %ld | interleaved v=%d\n", p, m,
                static_cast<long>(cfg.layers), static_cast<long>(cfg.d_model), static_cast<long>(cfg.micro_batch),
                static_cast<long>(cfg.seq_len), v);
  if (rank == 0)
    std::printf("%-12s %9s %12s %8s %13s %8s %17s %9s\n", "sched", "step ms", "wait/(w+c)", "theory", "wait/compute",
                "theory", "peak act MiB(st0)", "in flight");
  for (const std::string variant : {"gpipe", "1f1b", "1f1b+rc", "interleaved"}) {
    const bool recompute = variant == "1f1b+rc", inter = variant == "interleaved";
    const Schedule sched = inter ? Schedule::interleaved : variant == "gpipe" ? Schedule::gpipe : Schedule::one_f_one_b;
    const int chunks = inter ? v : 1;
    const ModelDescription desc = describe_model(model_entry(cfg), cfg.seq_len);
    const int pieces = p * chunks;
    if (inter && (m % p != 0 || pieces > static_cast<int>(desc.layers.size()))) continue;
    const Partition part = choose_partition(PartitionKind::params, desc, pieces);
    auto stage = std::make_shared<StageModel>(build_model(cfg, stage_chunks(part, rank, p)));  // its layers only
    stage->set_recompute(recompute);
    PipelineGradientSource src(stage, tokens, layout, Device::cpu, world, make_plan(sched, rank, p, m, chunks), true);
    ClearGrads no_sync(stage);
    StepContext ctx;  // loss factor 1; the losses go to a state nobody reads
    ctx.loss_factor = Tensor::from_vector(std::vector<double>{1.0}, {}, DType::f32);
    ctx.state = ops::step_state_tensor(ops::DeviceStepState{}, Device::cpu);
    const int steps = 4;
    double step_ms = 0, wait = 0, compute = 0;
    int64_t peak = 0, in_flight = 0;
    for (int s = 0; s < steps + 1; ++s) {
      world->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      ctx.step = s;
      src.compute_gradients(ctx, no_sync);
      double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      stage->zero_grad(true);
      if (s == 0) continue;  // warm-up
      step_ms += dt;
      wait += src.stats().wait_ms;
      compute += src.stats().compute_ms;
      peak = std::max(peak, src.stats().peak_activation_bytes);
      in_flight = std::max(in_flight, src.stats().peak_in_flight);
    }
    std::vector<float> mine{static_cast<float>(wait / (wait + compute)), static_cast<float>(wait / compute),
                            static_cast<float>(step_ms / steps), static_cast<float>(peak), static_cast<float>(in_flight)};
    const int n = static_cast<int>(mine.size());
    Tensor t = Tensor::from_vector(mine, {n});
    Tensor all = Tensor::empty({n * p});
    world->all_gather(t, all)->wait();
    auto x = all.to_double();
    if (rank == 0) {
      double of_step = 0, of_compute = 0, max_step = 0;
      for (int r = 0; r < p; ++r) {
        of_step += x[n * r] / p;
        of_compute += x[n * r + 1] / p;
        max_step = std::max(max_step, x[n * r + 2]);
      }
      const double vm = static_cast<double>(chunks) * m;
      std::printf("%-12s %9.1f %12.3f %8.3f %13.3f %8.3f %17.2f %9.0f\n", variant.c_str(), max_step, of_step,
                  (p - 1.0) / (vm + p - 1.0), of_compute, (p - 1.0) / vm, x[3] / (1 << 20), x[4]);
    }
  }
  MPI_Finalize();
  return 0;
}
