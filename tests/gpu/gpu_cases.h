// Shared by the gpu op tests: runs one OpCase on the GPU in f32, f16 and bf16 against the CPU
// f32 op on the same (rounded) inputs, forward and backward (tests/ops/harness.h).
#pragma once
#include <gtest/gtest.h>

#include "tests/ops/harness.h"

namespace st::test {

struct GpuTol {
  double f32 = 1e-5, f16 = 1e-2, bf16 = 4e-2;
};

inline void check_gpu(const OpCase& c, GpuTol tol = {}) {
  check_op_against_cpu(c, Device::cuda, DType::f32, tol.f32);
  if (c.low_precision) {
    check_op_against_cpu(c, Device::cuda, DType::f16, tol.f16);
    check_op_against_cpu(c, Device::cuda, DType::bf16, tol.bf16);
  }
}

}  // namespace st::test
