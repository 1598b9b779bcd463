#include "tests/support/gpu_presence.h"

#include <cuda_runtime.h>

#include <filesystem>
#include <regex>

namespace st::testing_support {
namespace {

std::string nvidia_device_node() {  // "/dev/nvidia0" when the machine has one, else ""
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, std::regex("nvidia[0-9]+"))) return e.path().string();
  }
  return "";
}

}  // namespace

GpuPresence probe_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  std::string error;
  if (e != cudaSuccess)
    error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  else if (n == 0)
    error = "cudaGetDeviceCount found 0 devices";
  if (error.empty()) return {};
  if (const std::string node = nvidia_device_node(); !node.empty())
    return {GpuPresence::State::broken, node + " exists but CUDA finds no device: " + error};
  return {GpuPresence::State::absent, "no CUDA device: " + error};
}

}  // namespace st::testing_support
