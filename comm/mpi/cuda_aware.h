// How the MPI backend hands CUDA tensors to MPI: device pointers directly when the MPI library is
// CUDA-aware, else through pinned host staging (comm/mpi/host_stage.h). Decided once per process:
//   SHARDTRAIN_MPI_CUDA_AWARE=1   pass device pointers (trusts the user: a library that is not
//                                 CUDA-aware then crashes reading device memory)
//   SHARDTRAIN_MPI_CUDA_AWARE=0   always stage through the host
//   unset                         MPIX_Query_cuda_support() where <mpi-ext.h> defines
//                                 MPIX_CUDA_AWARE_SUPPORT (Open MPI); staging everywhere else
// f16 / bf16 reductions are widened to f32 on the host on both paths.
#pragma once
#include <string>

namespace st::comm::mpi {

struct CudaPath {
  bool aware = false;
  std::string note;  // one line for the log, e.g. "CUDA tensors: pinned host staging (...)"
};

// Pure decision (tested without a GPU): `env` is the variable's value (nullptr when unset),
// `ext_support` whether the library declares the query, `query` its answer (1 = aware).
// Throws ValueError for an env value other than 0 or 1.
CudaPath decide_cuda_path(const char* env, bool ext_support, int query);

// This process's decision, made at the first call (after MPI_Init) and cached.
const CudaPath& cuda_path();

}  // namespace st::comm::mpi
