// CUDA-aware MPI detection (see cuda_aware.h). The one #if of the backend: whether the library's
// <mpi-ext.h> declares MPIX_Query_cuda_support (Open MPI defines MPIX_CUDA_AWARE_SUPPORT there,
// 1 when built with CUDA); no other MPI offers a portable query.
#include "comm/mpi/cuda_aware.h"

#include <mpi.h>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace st::comm::mpi {
namespace {

#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
constexpr bool kExtSupport = true;
int query_library() { return MPIX_Query_cuda_support(); }
#else
constexpr bool kExtSupport = false;
int query_library() { return 0; }
#endif

}  // namespace

CudaPath decide_cuda_path(CudaAwareMode mode, bool ext_support, int query) {
  if (mode == CudaAwareMode::on)
    return {true, "CUDA tensors: device pointers passed to MPI (forced on: SHARDTRAIN_MPI_CUDA_AWARE=1)"};
  if (mode == CudaAwareMode::off)
    return {false, "CUDA tensors: pinned host staging (forced off: SHARDTRAIN_MPI_CUDA_AWARE=0)"};
  if (!ext_support)
    return {false, "CUDA tensors: pinned host staging (the MPI library's <mpi-ext.h> declares no CUDA-aware support)"};
  if (query == 1) return {true, "CUDA tensors: device pointers passed to MPI (MPIX_Query_cuda_support() = 1)"};
  return {false, "CUDA tensors: pinned host staging (MPIX_Query_cuda_support() = 0)"};
}

CudaPath cuda_path(CudaAwareMode mode) {
  if (mode != CudaAwareMode::ask) return decide_cuda_path(mode, kExtSupport, 0);
  static const int query = kExtSupport ? query_library() : 0;
  return decide_cuda_path(mode, kExtSupport, query);
}

}  // namespace st::comm::mpi
