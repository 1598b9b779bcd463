// PrecisionOptions: the numbers a run computes in — the compute precision (f32 masters always),
// TF32 products on CUDA, and when a run that has gone inf/NaN (runtime/train/nonfinite.h) or
// diverged with finite numbers (runtime/train/divergence.h) stops.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"
#include "runtime/optim/mixed_precision.h"

namespace st::runtime {

struct PrecisionOptions {
  Precision precision = Precision::fp32;
  // --precision fp8's scaling (runtime/optim/mixed_precision.h fp8_training_recipe): current, or
  // delayed with a history of fp8_amax_history amaxes per tensor (1 … 4096; read only when delayed)
  ops::Fp8ScaleMode fp8_scaling = ops::Fp8ScaleMode::current;
  int64_t fp8_amax_history = 16;
  bool tf32 = false;  // CUDA f32 GEMMs on TF32 tensor cores (ops/matmul.h set_gemm_allow_tf32); false: exact
  // fp32/bf16: a step whose loss or grad norm is inf/NaN is skipped; this many in a row stop the
  // run (fp16: overflows at the loss scale's floor). 0: never stop.
  int64_t max_nonfinite_steps = 1;
  // a loss above max_loss_ratio × its running mean (at least 1) for loss_ratio_steps steps in a
  // row stops the run; 0: off. On by default with a large ratio (runtime/train/divergence.h).
  double max_loss_ratio = 100;
  int64_t loss_ratio_steps = 3;
  // this many steps in a row with a global grad norm of exactly 0 stop the run; 0: never
  int64_t max_zero_grad_steps = 3;

  void validate(const OptionFail& fail) const {
    require_non_negative(fail, "max-nonfinite-steps", static_cast<double>(max_nonfinite_steps));
    if (!(max_loss_ratio == 0 || max_loss_ratio > 1))
      fail("max-loss-ratio", "must be 0 (off) or > 1, got " + option_str(max_loss_ratio));
    require_positive(fail, "loss-ratio-steps", static_cast<double>(loss_ratio_steps));
    require_non_negative(fail, "max-zero-grad-steps", static_cast<double>(max_zero_grad_steps));
    if (fp8_scaling == ops::Fp8ScaleMode::delayed && precision != Precision::fp8)
      fail("fp8-scaling", "delayed scales FP8 casts: it needs --precision fp8 (this run is " +
                              std::string(to_string(precision)) + ")");
    if (fp8_amax_history < 1 || fp8_amax_history > 4096)
      fail("fp8-amax-history", "must be in 1 ... 4096, got " + std::to_string(fp8_amax_history));
  }
};

}  // namespace st::runtime
