// bench_comm_gpu: all-reduce of f32 CUDA tensors, shardtrain against the raw libraries in the same
// run, 4 KB to 256 MB (a program, not a test; built with NCCL; run under mpirun on a GPU host).
//
//   mpirun -np 1 build/tests/bench/bench_comm_gpu [--max-mb 256]   # NCCL and MPI sections
//   mpirun -np 2 build/tests/bench/bench_comm_gpu                  # 2 ranks on 1 GPU: MPI only
//
// (i) NCCL backend: `all_reduce(t)->wait()` against `ncclAllReduce` + `cudaStreamSynchronize` on
//     the same device buffer, over a raw NCCL communicator of the same ranks. Runs when every
//     rank has its own GPU (NCCL refuses two ranks on one device); at world size 1 it measures
//     shardtrain's per-call overhead (events, comm stream, Work polling) over the raw call.
// (ii) MPI backend on CUDA tensors: `all_reduce(t)->wait()` + stream sync (the upload finished)
//     against the raw calls on a pinned host buffer with a cudaMemcpyAsync + sync each way (what
//     pinned staging does by hand): MPI_Iallreduce + MPI_Wait (the backend's own call: its
//     overhead), blocking MPI_Allreduce (what a user without deadlines could call), and the
//     host-only MPI_Allreduce for scale.
// Time per call = the slowest rank's, best of kRounds rounds of `iters` calls; the methods run
// interleaved (rotated) on the same buffer, so they see the same memory and background load. The
// buffers hold zeros, which stay zeros under repeated sums.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi/cuda_aware.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/nccl_backend.h"
#include "tensor/cuda/runtime.h"
#include "tests/bench/mpi_timing.h"

using namespace st;
using namespace st::bench;
using namespace st::comm;

namespace {

#define BENCH_NCCL(expr)                                                                              \
  do {                                                                                                \
    ncclResult_t r_ = (expr);                                                                         \
    if (r_ != ncclSuccess) ST_THROW(CommError, #expr << " failed: " << ncclGetErrorString(r_));       \
  } while (0)

int iters_for(size_t bytes) { return static_cast<int>(std::clamp<size_t>((size_t(1) << 27) / bytes, 3, 200)); }

void nccl_section(int rank, int size, size_t max_bytes) {
  auto comm = create_nccl_communicator(MPI_COMM_WORLD, rank, "bench", Millis(120000));
  ncclUniqueId id;
  if (rank == 0) BENCH_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t raw = nullptr;
  BENCH_NCCL(ncclCommInitRank(&raw, size, id, rank));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (rank == 0) {
    std::printf("\n(i) NCCL backend vs raw ncclAllReduce, %d rank(s), f32 in place, time per call (best of %d)\n\n",
                size, kRounds);
    std::printf("| size | shardtrain all_reduce->wait | raw ncclAllReduce+sync | overhead | overhead %% |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
  }
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Tensor t = Tensor::zeros({n}, DType::f32, Device::cuda);  // (n)
    float* p = t.data<float>();
    st::cuda::synchronize();
    std::vector<double> best = best_of(iters_for(bytes), {
        [&] { comm->all_reduce(t)->wait(); },
        [&] {
          BENCH_NCCL(ncclAllReduce(p, p, static_cast<size_t>(n), ncclFloat32, ncclSum, raw, stream));
          CHECK_CUDA(cudaStreamSynchronize(stream));
        },
    });
    if (rank == 0) {
      std::printf("| %s | %.1f us | %.1f us | %+.1f us | %+.1f%% |\n", human(bytes).c_str(), best[0] * 1e6,
                  best[1] * 1e6, (best[0] - best[1]) * 1e6, 100.0 * (best[0] / best[1] - 1.0));
      std::fflush(stdout);
    }
  }
  st::cuda::synchronize();
  comm.reset();
  ncclCommDestroy(raw);
  cudaStreamDestroy(stream);
}

void mpi_section(int rank, int size, size_t max_bytes) {
  // SHARDTRAIN_MPI_CUDA_AWARE=0|1 picks the path, as it does for shardtrain (launch/comm_env.h)
  CommOptions options;
  const char* aware = std::getenv("SHARDTRAIN_MPI_CUDA_AWARE");
  options.mpi_cuda_aware = parse_cuda_aware(aware ? aware : "", "SHARDTRAIN_MPI_CUDA_AWARE");
  auto comm = MpiCommunicator::dup(MPI_COMM_WORLD, "bench", Millis(120000), options);
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  void* host = nullptr;  // the raw method's pinned buffer, max_bytes
  CHECK_CUDA(cudaHostAlloc(&host, max_bytes, cudaHostAllocDefault));
  std::memset(host, 0, max_bytes);
  if (rank == 0) {
    std::printf("\n(ii) MPI backend on CUDA tensors vs the raw calls on pinned host memory + the two copies,\n"
                "%d rank(s) (sharing the GPU when more than one), f32 in place; %s\n"
                "(the backend's own call is MPI_Iallreduce: every wait has a deadline)\n\n",
                size, mpi::cuda_path(options.mpi_cuda_aware).note.c_str());
    std::printf("| size | shardtrain all_reduce->wait+sync | raw D2H+MPI_Iallreduce/Wait+H2D | overhead %% | "
                "raw D2H+MPI_Allreduce+H2D | vs it %% | raw MPI_Allreduce host only | staged GB/s |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  uint64_t grew_while_timed = 0;  // staging blocks allocated after the first call of each size
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Tensor t = Tensor::zeros({n}, DType::f32, Device::cuda);  // (n)
    float* p = t.data<float>();
    cudaStream_t s = st::cuda::current_stream();
    comm->all_reduce(t)->wait();  // the first call of a size may grow the pool
    st::cuda::synchronize();
    const uint64_t allocs = comm->staging_allocations();
    std::vector<double> best = best_of(iters_for(bytes), {
        [&] {
          comm->all_reduce(t)->wait();
          st::cuda::synchronize();  // the upload has landed
        },
        [&] {
          CHECK_CUDA(cudaMemcpyAsync(host, p, bytes, cudaMemcpyDeviceToHost, s));
          CHECK_CUDA(cudaStreamSynchronize(s));
          MPI_Allreduce(MPI_IN_PLACE, host, static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
          CHECK_CUDA(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, s));
          CHECK_CUDA(cudaStreamSynchronize(s));
        },
        [&] { MPI_Allreduce(MPI_IN_PLACE, host, static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw); },
        [&] {
          CHECK_CUDA(cudaMemcpyAsync(host, p, bytes, cudaMemcpyDeviceToHost, s));
          CHECK_CUDA(cudaStreamSynchronize(s));
          MPI_Request req;
          MPI_Iallreduce(MPI_IN_PLACE, host, static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw, &req);
          MPI_Wait(&req, MPI_STATUS_IGNORE);
          CHECK_CUDA(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, s));
          CHECK_CUDA(cudaStreamSynchronize(s));
        },
    });
    grew_while_timed += comm->staging_allocations() - allocs;
    if (rank == 0) {
      std::printf("| %s | %.1f us | %.1f us | %+.1f%% | %.1f us | %+.1f%% | %.1f us | %.2f |\n", human(bytes).c_str(),
                  best[0] * 1e6, best[3] * 1e6, 100.0 * (best[0] / best[3] - 1.0), best[1] * 1e6,
                  100.0 * (best[0] / best[1] - 1.0), best[2] * 1e6, bytes / best[0] / 1e9);
      std::fflush(stdout);
    }
  }
  if (rank == 0)
    std::printf("\nstaging pool: %llu page-locked blocks, %.1f MiB held; %llu allocated during the timed calls\n",
                static_cast<unsigned long long>(comm->staging_allocations()), comm->staging_bytes() / 1048576.0,
                static_cast<unsigned long long>(grew_while_timed));
  comm.reset();
  MPI_Comm_free(&raw);
  cudaFreeHost(host);
}

}  // namespace

int main(int argc, char** argv) {
  const BenchMpi mpi = bench_mpi_init(argc, argv);
  const int rank = mpi.rank, size = mpi.size;
  const size_t max_bytes = mpi.max_mb * (size_t(1) << 20);
  const int gpus = nccl_visible_devices();
  int own = gpus >= size ? 1 : 0, all_own = 0;  // every rank has its own GPU (one node)
  MPI_Allreduce(&own, &all_own, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  st::cuda::set_device(all_own ? rank : rank % std::max(gpus, 1));
  const double t0 = now_s();
  if (rank == 0) {
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, st::cuda::current_device()));
    int nccl_version = 0;
    ncclGetVersion(&nccl_version);
    std::printf("bench_comm_gpu: %d rank(s), %d GPU(s) visible (%s), NCCL %d\n", size, gpus, prop.name, nccl_version);
  }
  try {
    if (all_own)
      nccl_section(rank, size, max_bytes);
    else if (rank == 0)
      std::printf("\n(i) NCCL section skipped: %d ranks share %d GPU(s) (NCCL needs one GPU per rank)\n", size, gpus);
    mpi_section(rank, size, max_bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] bench_comm_gpu: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) std::printf("\ntotal %.1f s\n", now_s() - t0);
  MPI_Finalize();
  return 0;
}
