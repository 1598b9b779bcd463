#include "runtime/optim/mixed_precision.h"

#include <algorithm>
#include <iostream>

#include "tensor/error.h"

namespace st::runtime {

ops::Fp8LinearOptions fp8_training_recipe(ops::Fp8ScaleMode mode, int64_t history) {
  ops::Fp8LinearOptions o;
  o.mode = mode;
  o.history = history;
  o.grad_format = ops::Fp8Format::e4m3;
  o.pow2 = true;
  return o;
}

LossScaler::LossScaler(bool enabled, double init_scale, int64_t growth_interval, double min_scale)
    : enabled_(enabled), scale_(enabled ? init_scale : 1.0), growth_interval_(growth_interval), min_scale_(min_scale) {
  ST_CHECK(!enabled || (init_scale > 0 && growth_interval > 0 && min_scale > 0), ValueError,
           "loss scaler: scale, growth interval and floor must be positive");
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return false;
  if (found_inf) {
    good_steps_ = 0;
    if (scale_ * 0.5 < min_scale_) {
      if (!warned_)
        std::cerr << "warning: fp16 loss scale is at its floor (" << min_scale_
                  << ") and gradients still overflow; steps keep being skipped (try --precision bf16)\n";
      warned_ = true;
      scale_ = min_scale_;
    } else {
      scale_ *= 0.5;
    }
    return true;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
  return false;
}

void LossScaler::set_state(double scale, int64_t good_steps) {
  ST_CHECK(!enabled_ || scale > 0, ValueError, "loss scaler: scale " << scale << " is not positive");
  scale_ = enabled_ ? scale : 1.0;
  good_steps_ = good_steps;
}

}  // namespace st::runtime
