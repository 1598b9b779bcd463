// main() for the gpu-label GoogleTest binaries. On a machine with no GPU (no /dev/nvidia<N> device
// node and cudaGetDeviceCount finds none) every test is skipped with the reason ("no CUDA device: "
// + cudaGetDeviceCount's error) and the binary exits 77, which ctest reports as "Skipped"
// (SKIP_RETURN_CODE in tests/gpu/CMakeLists.txt). Where a device node exists, CUDA must work: a
// CUDA error is a failure (exit 1) with the reason, never a skip, and with a device the tests run
// and the exit code is GoogleTest's (0 or 1). So a failure on a GPU machine is a failure.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

namespace {

constexpr int kSkipReturnCode = 77;  // = SKIP_RETURN_CODE

std::string nvidia_device_node() {  // "/dev/nvidia0" when the machine has one, else ""
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, std::regex("nvidia[0-9]+"))) return e.path().string();
  }
  return "";
}

std::string cuda_error() {  // why CUDA sees no device, or "" when it sees one
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  if (n == 0) return "cudaGetDeviceCount found 0 devices";
  return "";
}

class NoCudaDevice : public testing::Environment {
 public:
  explicit NoCudaDevice(std::string reason) : reason_(std::move(reason)) {}
  void SetUp() override { GTEST_SKIP() << reason_; }

 private:
  std::string reason_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const std::string error = cuda_error();
  if (error.empty()) return RUN_ALL_TESTS();
  if (const std::string node = nvidia_device_node(); !node.empty()) {
    std::fprintf(stderr, "GPU test FAILED: %s exists but CUDA finds no device: %s\n", node.c_str(), error.c_str());
    return 1;
  }
  const std::string reason = "no CUDA device: " + error;
  testing::AddGlobalTestEnvironment(new NoCudaDevice(reason));
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  std::printf("%s: every test skipped\n", reason.c_str());
  return kSkipReturnCode;
}
