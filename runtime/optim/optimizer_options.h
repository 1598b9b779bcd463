// OptimizerOptions: the optimizer, its hyper-parameters, clipping and the learning-rate schedule
// (the "optimizer" group of --help).
#pragma once
#include <cstdint>

#include "runtime/common/option_check.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"

namespace st::runtime {

struct OptimizerOptions {
  OptimizerKind optimizer = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;  // sgd
  double clip = 1.0;      // 0: no clipping
  LrScheduleKind lr_schedule = LrScheduleKind::constant;
  int64_t warmup = 0;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr

  void validate(const OptionFail& fail) const {
    require_non_negative(fail, "lr", lr);
    require_non_negative(fail, "weight-decay", weight_decay);
    if (beta1 < 0 || beta1 >= 1) fail("beta1", "must be in [0, 1), got " + option_str(beta1));
    if (beta2 < 0 || beta2 >= 1) fail("beta2", "must be in [0, 1), got " + option_str(beta2));
    if (eps <= 0) fail("eps", "must be positive, got " + option_str(eps));
    if (momentum < 0 || momentum >= 1) fail("momentum", "must be in [0, 1), got " + option_str(momentum));
    require_non_negative(fail, "clip", clip);
    require_non_negative(fail, "warmup", static_cast<double>(warmup));
    if (min_lr_ratio < 0 || min_lr_ratio > 1) fail("min-lr-ratio", "must be in [0, 1], got " + option_str(min_lr_ratio));
  }
};

}  // namespace st::runtime
