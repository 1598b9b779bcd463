// Data-parallel overlap benchmark (a program, not a test): how much gradient communication a
// step exposes. For each --bucket-mb it builds the same GPT twice through the real Trainer — one
// with the gradient collectives, one with the reducer's skip_collectives seam (the reducer does
// everything but the collectives: the same per-rank work) — and steps them in pairs, one step of
// each, the order alternating from pair to pair, so that load on the machine hits both alike.
// It prints
//   exposed communication = median over pairs of (step with communication − step without)
// (and the quartiles of that difference, the noise) beside the median step times (a step's time is the slowest rank's), the buckets per step and
// what a run can see by itself: the time finish() waited per step.
//
//   mpirun -np 2 build/tests/bench/bench_dp_overlap [--bucket-mb 1,25,1000] [--layers 4]
//       [--d-model 128] [--heads 4] [--vocab 256] [--seq-len 64] [--micro-batch 4]
//       [--grad-accum 1] [--pairs 16] [--warmup 2] [--precision fp32] [--grad-comm-dtype fp32]
//       [--zero 0|1] [--device cpu|cuda] [--comm auto|mpi|nccl]
//
// The same command runs on the CPU (MPI), on one GPU shared by the ranks (--device cuda --comm
// mpi: pinned host staging) and on several GPUs (--device cuda --comm nccl).
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

// The q-quantile of v (nearest rank); q = 0.5: the median.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// One variant: a fresh model and Trainer wired for DP (or ZeRO-1) over `world`.
struct Variant {
  GradReducer* reducer = nullptr;  // owned by the trainer's sync
  std::unique_ptr<Trainer> trainer;
};

Variant make_variant(const TrainConfig& cfg, const std::shared_ptr<comm::Communicator>& world, bool skip) {
  TrainInputs in = prepare_training(cfg, plan_model(cfg), {}, world->size(), world->rank());
  ReducerOptions ro;
  ro.skip_collectives = skip;
  ro.bucket_bytes = static_cast<size_t>(cfg.bucket_mb * (1 << 20));
  ro.first_bucket_bytes = std::min<size_t>(ro.bucket_bytes, 1u << 20);
  ro.comm_dtype = precision_policy(cfg).grad_comm;
  TrainerWiring w;
  w.world = world;
  w.layout = in.layout;
  w.source = std::make_unique<LocalGradientSource>(in.model, in.data, in.layout, in.device);
  w.reductions.loss = std::make_shared<CommReductions>(world);
  w.reductions.flag = w.reductions.loss;
  Variant v;
  if (cfg.zero) {
    auto zero = std::make_shared<Zero1>(in.model->named_parameters(), world, ro);
    for (auto& [name, p] : in.model->named_parameters())
      if (!zero->owns(name)) w.roles.updated_elsewhere.insert(name);
    w.reductions.grad = std::make_shared<CommReductions>(world);  // each rank holds its owners' norm share
    v.reducer = &zero->reducer();
    w.sync = std::make_shared<ZeroSync>(zero);
  } else {
    auto r = std::make_shared<GradReducer>(in.model->named_parameters(), world, ro);
    v.reducer = r.get();
    w.sync = std::make_shared<DataParallelSync>(r);
  }
  v.trainer = std::make_unique<Trainer>(cfg, in.model, std::move(w));
  return v;
}

// One step of `v`: the slowest rank's step time in ms.
double step(Variant& v, const std::shared_ptr<comm::Communicator>& world) {
  world->barrier()->wait();
  double ms = v.trainer->train_step().step_ms, worst = 0;
  MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
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
      {"pairs", "16"},            {"warmup", "2"},      {"precision", "fp32"}, {"grad-comm-dtype", "fp32"},
      {"zero", "0"},              {"device", "cpu"},    {"comm", "mpi"}};
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
    const int64_t warmup = std::stoll(a["warmup"]), pairs = std::stoll(a["pairs"]);
    cfg.steps = warmup + pairs;
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
      std::printf("%lld pairs of steps after %lld warm-up steps each; medians; a step = the slowest rank's\n",
                  static_cast<long long>(pairs), static_cast<long long>(warmup));
      std::printf("%9s %8s %14s %14s %11s %15s %9s %16s %16s\n", "bucket-mb", "buckets", "step ms comm", "step ms skip",
                  "exposed ms", "(quartiles)", "exposed", "finish() ms comm", "finish() ms skip");
    }
    for (double mb : split_list(a["bucket-mb"])) {
      cfg.bucket_mb = mb;
      Variant with = make_variant(cfg, world, /*skip=*/false), without = make_variant(cfg, world, /*skip=*/true);
      for (int64_t s = 0; s < warmup; ++s) {
        step(with, world);
        step(without, world);
      }
      with.reducer->reset_stats();
      without.reducer->reset_stats();
      std::vector<double> c, n, d;
      for (int64_t s = 0; s < pairs; ++s) {
        double cs = 0, ns = 0;
        if (s % 2 == 0) {
          cs = step(with, world);
          ns = step(without, world);
        } else {
          ns = step(without, world);
          cs = step(with, world);
        }
        c.push_back(cs);
        n.push_back(ns);
        d.push_back(cs - ns);
      }
      const ReducerStats& sw = with.reducer->stats();
      const ReducerStats& sn = without.reducer->stats();
      const double exposed = median(d), cm = median(c);
      if (rank == 0)
        std::printf("%9g %8lld %14.2f %14.2f %11.2f %7.1f..%-6.1f %8.1f%% %16.2f %16.2f\n", mb,
                    static_cast<long long>(sw.buckets_launched / std::max<int64_t>(sw.steps, 1)), cm, median(n), exposed,
                    quantile(d, 0.25), quantile(d, 0.75), cm > 0 ? 100.0 * exposed / cm : 0.0, sw.wait_ms / std::max<int64_t>(sw.steps, 1),
                    sn.wait_ms / std::max<int64_t>(sn.steps, 1));
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    rc = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
