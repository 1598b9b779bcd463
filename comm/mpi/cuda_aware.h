// How the MPI backend hands CUDA tensors to MPI: device pointers directly when the MPI library is
// CUDA-aware, else through pinned host staging (comm/mpi/host_stage.h). Decided per communicator
// from CommOptions::mpi_cuda_aware (the CLI fills it from SHARDTRAIN_MPI_CUDA_AWARE):
//   on    pass device pointers (trusts the user: a library that is not CUDA-aware then crashes
//         reading device memory)
//   off   always stage through the host
//   ask   MPIX_Query_cuda_support() where <mpi-ext.h> defines MPIX_CUDA_AWARE_SUPPORT (Open MPI),
//         asked once per process; staging everywhere else
// f16 / bf16 reductions are widened to f32 on the host on both paths.
#pragma once
#include <string>

#include "comm/comm_options.h"

namespace st::comm::mpi {

struct CudaPath {
  bool aware = false;
  std::string note;  // one line for the log, e.g. "CUDA tensors: pinned host staging (...)"
};

// Pure decision (tested without a GPU): `ext_support` whether the library declares the query,
// `query` its answer (1 = aware).
CudaPath decide_cuda_path(CudaAwareMode mode, bool ext_support, int query);

// The decision for `mode` in this process (after MPI_Init; the library is asked once).
CudaPath cuda_path(CudaAwareMode mode);

}  // namespace st::comm::mpi
