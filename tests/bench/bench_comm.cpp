// bench_comm: all-reduce bus bandwidth, shardtrain's Communicator against the raw MPI library in
// the same run, from 4 KB to 256 MB of f32 (a program, not a test; run under mpirun).
//
//   mpirun -np 2 build/tests/bench/bench_comm [--max-mb 256]
//
// Bus bandwidth = 2(n−1)/n × bytes / time (the NCCL-tests convention: what each link carries in
// a ring all-reduce). Time per call = the slowest rank's, best of kRounds rounds (the machine may
// be shared); the three methods run interleaved on the same buffer, so they see the same memory,
// cache state and background load. At the end: the fixed cost of a call, and the flight recorder's
// part of it (a communicator with the ring against one without).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "tests/bench/mpi_timing.h"

using namespace st;
using namespace st::bench;
using namespace st::comm;

int main(int argc, char** argv) {
  const BenchMpi mpi = bench_mpi_init(argc, argv);
  const int rank = mpi.rank, size = mpi.size;
  const size_t max_mb = mpi.max_mb;
  auto comm = MpiCommunicator::dup(MPI_COMM_WORLD, "bench", Millis(120000));
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);

  if (rank == 0) {
    std::printf("all-reduce f32, %d ranks, bus bandwidth GB/s = 2(n-1)/n x bytes / time (best of %d rounds)\n\n", size, kRounds);
    std::printf("| size | shardtrain all_reduce | raw MPI_Iallreduce+MPI_Wait | raw MPI_Allreduce | overhead vs Iallreduce | vs Allreduce |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
  }
  const double factor = 2.0 * (size - 1) / size;
  double raw_1mb_s = 0;  // raw MPI_Iallreduce time of a 1 MB call, for the overhead line below
  for (size_t bytes = 4096; bytes <= max_mb * (size_t(1) << 20); bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Tensor t = Tensor::zeros({n}, DType::f32);  // (n); zeros stay zeros under repeated sums
    float* p = t.data<float>();
    const int iters = static_cast<int>(std::clamp<size_t>((size_t(1) << 27) / bytes, 3, 200));
    std::vector<std::function<void()>> methods{
        [&] { comm->all_reduce(t)->wait(); },
        [&] {
          MPI_Request r;
          MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw, &r);
          MPI_Wait(&r, MPI_STATUS_IGNORE);
        },
        [&] { MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw); },
    };
    const std::vector<double> best = best_of(iters, methods);
    if (bytes == (size_t(1) << 20)) raw_1mb_s = best[1];
    if (rank == 0) {
      auto bw = [&](double s) { return factor * static_cast<double>(bytes) / s / 1e9; };
      std::printf("| %s | %.2f | %.2f | %.2f | %+.1f%% | %+.1f%% |\n", human(bytes).c_str(), bw(best[0]), bw(best[1]),
                  bw(best[2]), 100.0 * (best[0] / best[1] - 1.0), 100.0 * (best[0] / best[2] - 1.0));
      std::fflush(stdout);
    }
  }
  // Fixed cost per call, free of transport and scheduling noise: a 4 KB all-reduce on a one-rank
  // communicator (MPI_COMM_SELF) is pure call overhead, through shardtrain and raw.
  if (rank == 0) {
    auto self = MpiCommunicator::dup(MPI_COMM_SELF, "self", Millis(120000));
    MPI_Comm raw_self;
    MPI_Comm_dup(MPI_COMM_SELF, &raw_self);
    Tensor t = Tensor::zeros({1024}, DType::f32);
    float* p = t.data<float>();
    const int calls = 100000;
    auto per_call_us = [&](const std::function<void()>& fn) {
      double best_us = 1e30;
      for (int round = 0; round < kRounds; ++round) {
        double t0 = now_s();
        for (int i = 0; i < calls; ++i) fn();
        best_us = std::min(best_us, (now_s() - t0) / calls * 1e6);
      }
      return best_us;
    };
    double ours = per_call_us([&] { self->all_reduce(t)->wait(); });
    double theirs = per_call_us([&] {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, p, 1024, MPI_FLOAT, MPI_SUM, raw_self, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    });
    std::printf("\nfixed cost per call (4 KB, one rank): shardtrain %.2f us, raw MPI_Iallreduce+MPI_Wait %.2f us, "
                "difference %.2f us = %.3f%% of a raw 1 MB call here\n",
                ours, theirs, ours - theirs, raw_1mb_s > 0 ? 100.0 * (ours - theirs) * 1e-6 / raw_1mb_s : 0.0);
    // The flight recorder's share of it (comm/flight_recorder.h): the same calls on a communicator
    // that keeps no ring, interleaved in blocks of 10 000 with one that does; this thread's CPU
    // time (a shared machine's descheduling does not count), best of 20 blocks each.
    CommOptions off;
    off.flight_recorder_entries = 0;
    auto self_off = MpiCommunicator::dup(MPI_COMM_SELF, "self-off", Millis(120000), off);
    auto cpu_us = [](const std::function<void()>& fn) {
      timespec a{}, b{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
      for (int i = 0; i < 10000; ++i) fn();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
      return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 10000 / 1e3;
    };
    double with = 1e30, without = 1e30;
    for (int block = 0; block < 20; ++block) {
      with = std::min(with, cpu_us([&] { self->all_reduce(t)->wait(); }));
      without = std::min(without, cpu_us([&] { self_off->all_reduce(t)->wait(); }));
    }
    std::printf("flight recorder: %.3f us of CPU per call with the ring, %.3f us without (%+.3f us)\n", with, without,
                with - without);
    MPI_Comm_free(&raw_self);
  }
  comm.reset();
  MPI_Comm_free(&raw);
  MPI_Finalize();
  return 0;
}
