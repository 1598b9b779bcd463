// CUDA-aware MPI detection (see cuda_aware.h). The one #if of the backend: whether the library's
// <mpi-ext.h> declares MPIX_Query_cuda_support (Open MPI defines MPIX_CUDA_AWARE_SUPPORT there,
// 1 when built with CUDA); no other MPI offers a portable query.
#include "comm/mpi/cuda_aware.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include "tensor/error.h"

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

CudaPath decide_cuda_path(const char* env, bool ext_support, int query) {
  if (env && *env) {
    const std::string v(env);
    ST_CHECK(v == "0" || v == "1", ValueError, "SHARDTRAIN_MPI_CUDA_AWARE must be 0 or 1, got '" << v << "'");
    if (v == "1") return {true, "CUDA tensors: device pointers passed to MPI (SHARDTRAIN_MPI_CUDA_AWARE=1)"};
    return {false, "CUDA tensors: pinned host staging (SHARDTRAIN_MPI_CUDA_AWARE=0)"};
  }
  if (!ext_support)
    return {false, "CUDA tensors: pinned host staging (the MPI library's <mpi-ext.h> declares no CUDA-aware support)"};
  if (query == 1) return {true, "CUDA tensors: device pointers passed to MPI (MPIX_Query_cuda_support() = 1)"};
  return {false, "CUDA tensors: pinned host staging (MPIX_Query_cuda_support() = 0)"};
}

const CudaPath& cuda_path() {
  static const CudaPath path = [] {
    const char* env = std::getenv("SHARDTRAIN_MPI_CUDA_AWARE");
    const bool ask = kExtSupport && !(env && *env);
    return decide_cuda_path(env, kExtSupport, ask ? query_library() : 0);
  }();
  return path;
}

}  // namespace st::comm::mpi
