// Helpers for the multi-rank comm tests: the backends to run (MPI on CPU tensors always; MPI on
// CUDA tensors, "mpi_cuda", where a GPU is visible — the ranks may share it; NCCL on CUDA tensors
// where this build has NCCL and every rank has a GPU), and tensors of any dtype built from double
// values. Communicators take the binary's options (tests/support/test_comm_options.h: the p2p mode
// of the _strict registration) unless a test gives its own.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/nccl_backend.h"
#include "tensor/storage.h"
#include "tests/support/test_comm_options.h"

namespace st::comm::test {

inline constexpr Millis kTestTimeout{20000};

inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline std::vector<std::string> test_backends() {
  std::vector<std::string> b{"mpi"};
  if (::st::cuda::available()) b.push_back("mpi_cuda");
  if (nccl_built() && nccl_visible_devices() >= world_size()) b.push_back("nccl");
  return b;
}

inline Device backend_device(const std::string& backend) {
  return backend == "nccl" || backend == "mpi_cuda" ? Device::cuda : Device::cpu;
}

inline std::shared_ptr<Communicator> make_world(const std::string& backend, const std::string& name = "world",
                                                const CommOptions& options = testing_support::test_comm_options()) {
  if (backend == "nccl") return create_nccl_communicator(MPI_COMM_WORLD, world_rank(), name, kTestTimeout, options);
  return MpiCommunicator::dup(MPI_COMM_WORLD, name, kTestTimeout, options);
}

inline Tensor make_tensor(const std::vector<double>& v, DType t, Device d = Device::cpu) {
  const Shape shape{static_cast<int64_t>(v.size())};
  if (t == DType::i32) return Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), shape, d);
  if (t == DType::i64) return Tensor::from_vector(std::vector<int64_t>(v.begin(), v.end()), shape, d);
  return Tensor::from_vector(v, shape, t, d);
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d{DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  return d;
}

}  // namespace st::comm::test
