// main() for multi-rank gpu-label tests: every rank probes the GPU first
// (tests/support/gpu_presence.h); with none the tests are skipped (exit 77), a device node that
// CUDA cannot use is a failure.
#include <cstdio>

#include "tests/comm/mpi_test_runner.h"
#include "tests/support/gpu_presence.h"

int main(int argc, char** argv) {
  using st::testing_support::GpuPresence;
  const GpuPresence gpu = st::testing_support::probe_gpu();
  if (gpu.state == GpuPresence::State::broken) {
    std::fprintf(stderr, "GPU test FAILED: %s\n", gpu.reason.c_str());
    return 1;
  }
  return run_mpi_tests(argc, argv, gpu.state == GpuPresence::State::absent ? gpu.reason : "");
}
