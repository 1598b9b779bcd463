// What this binary was built with, as recorded by CMake (launch/build_info.cpp.in is filled by
// configure_file), for `shardtrain info` and `shardtrain --version`.
#pragma once
#include <string>

namespace st::launch {

struct BuildInfo {
  const char* version;
  const char* build_type;
  const char* compiler;
  bool cuda;
  const char* cuda_version;
  const char* cuda_arch;
  bool nccl;
  const char* nccl_version;
  bool cudnn;
  const char* cudnn_version;
  const char* mpi_standard;  // MPI standard version CMake found (e.g. 3.1)
  const char* eigen_version;
  const char* json_version;
  const char* yaml_cpp_version;
  const char* commit;  // git describe of the source tree at configure time, "unknown" without git
};

const BuildInfo& build_info();

// One line per device: CUDA devices (name, memory, compute capability) or why there are none.
std::string describe_devices();

// Why --device cuda cannot run here, in the words of describe_devices() ("this build has no CUDA",
// "no NVIDIA driver: none is installed, so no GPU is usable", "no usable device (...)"); "" when a
// CUDA device is usable. `shardtrain train|generate|sample --device cuda` refuse with it up front
// (not CUDA's own error from the first allocation or memory query).
std::string cuda_unusable();

}  // namespace st::launch
