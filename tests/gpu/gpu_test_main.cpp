// main() for the gpu-label GoogleTest binaries: skips (exit 77) where the machine has no GPU,
// fails where a device node exists but CUDA cannot use it (tests/support/gpu_presence.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/support/gpu_presence.h"

int main(int argc, char** argv) {
  using st::testing_support::GpuPresence;
  testing::InitGoogleTest(&argc, argv);
  const GpuPresence gpu = st::testing_support::probe_gpu();
  if (gpu.state == GpuPresence::State::usable) return RUN_ALL_TESTS();
  if (gpu.state == GpuPresence::State::broken) {
    std::fprintf(stderr, "GPU test FAILED: %s\n", gpu.reason.c_str());
    return 1;
  }
  testing::AddGlobalTestEnvironment(new st::testing_support::SkipAll(gpu.reason));
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  std::printf("%s: every test skipped\n", gpu.reason.c_str());
  return st::testing_support::kSkipReturnCode;
}
