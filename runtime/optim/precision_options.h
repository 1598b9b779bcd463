// PrecisionOptions: the numbers a run computes in — the compute precision (f32 masters always),
// TF32 products on CUDA, and when a run that has gone inf/NaN stops (runtime/train/nonfinite.h).
#pragma once
#include <cstdint>

#include "runtime/common/option_check.h"
#include "runtime/optim/mixed_precision.h"

namespace st::runtime {

struct PrecisionOptions {
  Precision precision = Precision::fp32;
  bool tf32 = false;  // CUDA f32 GEMMs on TF32 tensor cores (ops/matmul.h set_gemm_allow_tf32); false: exact
  // fp32/bf16: a step whose loss or grad norm is inf/NaN is skipped; this many in a row stop the
  // run (fp16: overflows at the loss scale's floor). 0: never stop.
  int64_t max_nonfinite_steps = 1;

  void validate(const OptionFail& fail) const {
    require_non_negative(fail, "max-nonfinite-steps", static_cast<double>(max_nonfinite_steps));
  }
};

}  // namespace st::runtime
