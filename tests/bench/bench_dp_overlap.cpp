// Data-parallel overlap benchmark (a program, not a test): how much gradient communication a
// step exposes. For each --bucket-mb it trains the same GPT through the real Trainer twice per
// round — with the gradient collectives, and with SHARDTRAIN_TEST_SKIP_GRAD_COMM=1 (the reducer
// does everything but the collectives: the same per-rank work) — and prints
//   exposed communication = step time with communication − step time without it
// beside both step times (median over the timed steps of the slowest rank's step), the buckets
// per step and what the run itself can see: the time finish() waited per step.
//
//   mpirun -np 2 build/tests/bench/bench_dp_overlap [--bucket-mb 1,25,1000] [--layers 4]
//       [--d-model 128] [--heads 4] [--vocab 256] [--seq-len 64] [--micro-batch 4]
//       [--grad-accum 1] [--steps 8] [--warmup 2] [--rounds 2] [--precision fp32]
//       [--grad-comm-dtype fp32] [--zero 0|1] [--device cpu|cuda] [--comm auto|mpi|nccl]
//
// The same command runs on the CPU (MPI), on one GPU shared by the ranks (--device cuda --comm
// mpi: pinned host staging) and on several GPUs (--device cuda --comm nccl). Rounds alternate
// the two variants so that drift of the machine hits both alike.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/make_communicator.h"
#include "comm/mpi_env.h"
#include "runtime/data/token_data.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/train/trainer.h"
#include "tensor/philox.h"

using namespace st;
using namespace st::runtime;

namespace {

struct Result {
  std::vector<double> step_ms;  // slowest rank's, per timed step
  double wait_ms = 0;           // finish() per step (rank 0)
  int64_t buckets = 0;          // per step
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One run: a fresh model and Trainer wired for DP (or ZeRO-1) over `world`.
Result run(const TrainConfig& cfg, const std::shared_ptr<comm::Communicator>& world, bool skip, int64_t warmup) {
  if (skip)
    setenv("SHARDTRAIN_TEST_SKIP_GRAD_COMM", "1", 1);
  else
    unsetenv("SHARDTRAIN_TEST_SKIP_GRAD_COMM");
  TrainInputs in = prepare_training(cfg, world->size(), world->rank());
  ReducerOptions ro;
  ro.bucket_bytes = static_cast<size_t>(cfg.bucket_mb * (1 << 20));
  ro.first_bucket_bytes = std::min<size_t>(ro.bucket_bytes, 1u << 20);
  ro.comm_dtype = compute_dtype(cfg.grad_comm_dtype);
  TrainerWiring w;
  w.world = world;
  w.layout = in.layout;
  w.source = std::make_unique<LocalGradientSource>(in.model, in.data, in.layout, in.device);
  w.reductions.loss = std::make_shared<CommReductions>(world);
  w.reductions.flag = w.reductions.loss;
  GradReducer* reducer = nullptr;
  if (cfg.zero) {
    auto zero = std::make_shared<Zero1>(in.model->named_parameters(), world, ro);
    for (auto& [name, p] : in.model->named_parameters())
      if (!zero->owns(name)) w.roles.updated_elsewhere.insert(name);
    w.reductions.grad = std::make_shared<CommReductions>(world);  // each rank holds its owners' norm share
    reducer = &zero->reducer();
    w.sync = std::make_shared<ZeroSync>(zero);
  } else {
    auto r = std::make_shared<GradReducer>(in.model->named_parameters(), world, ro);
    reducer = r.get();
    w.sync = std::make_shared<DataParallelSync>(r);
  }
  unsetenv("SHARDTRAIN_TEST_SKIP_GRAD_COMM");
  Trainer trainer(cfg, in.model, std::move(w));
  Result res;
  for (int64_t s = 0; s < cfg.steps; ++s) {
    if (s == warmup) reducer->reset_stats();
    world->barrier()->wait();
    double ms = trainer.train_step().step_ms, worst = 0;
    MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (s >= warmup) res.step_ms.push_back(worst);
  }
  const ReducerStats& st = reducer->stats();
  res.wait_ms = st.steps ? st.wait_ms / static_cast<double>(st.steps) : 0.0;
  res.buckets = st.steps ? st.buckets_launched / st.steps : 0;
  return res;
}

std::vector<double> split_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stod(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int provided;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  std::map<std::string, std::string> a = {
      {"bucket-mb", "1,25,1000"}, {"layers", "4"},      {"d-model", "128"},   {"heads", "4"},
      {"vocab", "256"},           {"seq-len", "64"},    {"micro-batch", "4"}, {"grad-accum", "1"},
      {"steps", "8"},             {"warmup", "2"},      {"rounds", "2"},      {"precision", "fp32"},
      {"grad-comm-dtype", "fp32"}, {"zero", "0"},       {"device", "cpu"},    {"comm", "mpi"}};
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !a.count(k.substr(2)) || i + 1 >= argc) {
      if (rank == 0) std::cerr << "bench_dp_overlap: unknown option or missing value: " << k << "\n";
      MPI_Finalize();
      return 2;
    }
    a[k.substr(2)] = argv[i + 1];
  }
  int rc = 0;
  try {
    TrainConfig cfg;
    cfg.model = "gpt";
    cfg.layers = std::stoll(a["layers"]);
    cfg.d_model = std::stoll(a["d-model"]);
    cfg.heads = std::stoll(a["heads"]);
    cfg.vocab = std::stoll(a["vocab"]);
    cfg.seq_len = std::stoll(a["seq-len"]);
    cfg.micro_batch = std::stoll(a["micro-batch"]);
    cfg.grad_accum = std::stoll(a["grad-accum"]);
    cfg.precision = parse_enum<Precision>(a["precision"], "--precision");
    cfg.grad_comm_dtype = parse_enum<Precision>(a["grad-comm-dtype"], "--grad-comm-dtype");
    cfg.zero = a["zero"] == "1";
    cfg.device = parse_enum<Device>(a["device"], "--device");
    cfg.comm = a["comm"];
    cfg.lr = 1e-3;
    cfg.weight_decay = 0.1;
    const int64_t warmup = std::stoll(a["warmup"]), rounds = std::stoll(a["rounds"]);
    cfg.steps = warmup + std::stoll(a["steps"]);
    cfg.log_every = 0;
    cfg.progress = false;
    cfg.timeout_s = 600;
    comm::CommSetup setup = comm::make_communicator(cfg.comm, std::chrono::seconds(600));
    auto world = setup.world;
    cfg.data = "/tmp/bench_dp_overlap_tokens.bin";
    if (rank == 0) {
      std::vector<uint16_t> tok(static_cast<size_t>(cfg.steps * world->size() * cfg.micro_batch * cfg.grad_accum *
                                                    (cfg.seq_len + 1) + 1));
      for (size_t i = 0; i < tok.size(); ++i)
        tok[i] = static_cast<uint16_t>(philox4x32_10(11, i).x[0] % static_cast<uint32_t>(cfg.vocab));
      write_token_file(cfg.data, tok);
    }
    world->barrier()->wait();
    if (rank == 0) {
      std::printf("dp %d%s | GPT layers %lld d %lld heads %lld vocab %lld | T %lld micro-batch %lld x %lld | %s, "
                  "grad comm %s | %s, %s\n",
                  world->size(), cfg.zero ? " zero 1" : "", static_cast<long long>(cfg.layers),
                  static_cast<long long>(cfg.d_model), static_cast<long long>(cfg.heads),
                  static_cast<long long>(cfg.vocab), static_cast<long long>(cfg.seq_len),
                  static_cast<long long>(cfg.micro_batch), static_cast<long long>(cfg.grad_accum),
                  to_string(cfg.precision).c_str(), to_string(cfg.grad_comm_dtype).c_str(),
                  a["device"].c_str(), setup.reason.c_str());
      std::printf("median of %s steps after %lld warm-up, slowest rank, %lld rounds each\n", a["steps"].c_str(),
                  static_cast<long long>(warmup), static_cast<long long>(rounds));
      std::printf("%9s %8s %14s %14s %11s %9s %16s %16s\n", "bucket-mb", "buckets", "step ms comm", "step ms skip",
                  "exposed ms", "exposed", "finish() ms comm", "finish() ms skip");
    }
    for (double mb : split_list(a["bucket-mb"])) {
      cfg.bucket_mb = mb;
      std::vector<double> with, without;
      Result last_with, last_without;
      for (int64_t r = 0; r < rounds; ++r)
        for (int v = 0; v < 2; ++v) {
          const bool skip = (v + r) % 2 == 1;  // round 0: comm first; round 1: skip first; ...
          Result res = run(cfg, world, skip, warmup);
          auto& dst = skip ? without : with;
          dst.insert(dst.end(), res.step_ms.begin(), res.step_ms.end());
          (skip ? last_without : last_with) = res;
        }
      const double c = median(with), s = median(without);
      if (rank == 0)
        std::printf("%9g %8lld %14.2f %14.2f %11.2f %8.1f%% %16.2f %16.2f\n", mb,
                    static_cast<long long>(last_with.buckets), c, s, c - s, c > 0 ? 100.0 * (c - s) / c : 0.0,
                    last_with.wait_ms, last_without.wait_ms);
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    rc = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
