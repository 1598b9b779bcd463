// Whether this machine has a usable CUDA device, for the mains of gpu-label tests. With no GPU
// (no /dev/nvidia<N> device node and cudaGetDeviceCount finds none) a gpu test skips every case
// with the reason and exits 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE 77). Where a
// device node exists CUDA must work: an error there is a failure, never a skip, so a failure on a
// GPU machine stays a failure.
#pragma once
#include <string>

#include "tests/support/skip_all.h"

namespace st::testing_support {

struct GpuPresence {
  enum class State { usable, absent, broken };
  State state = State::usable;
  std::string reason;  // absent: "no CUDA device: <CUDA's error>"; broken: what failed
};
GpuPresence probe_gpu();

}  // namespace st::testing_support
