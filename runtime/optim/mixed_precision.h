// Mixed precision: fp32 | fp16 | bf16 (all three on CPU and GPU).
//   fp32: parameters, activations and gradients in f32.
//   bf16: the model's parameters (hence activations and gradients) in bf16; f32 master weights
//         in the optimizer (runtime/optim/optimizer.h); no loss scaling (bf16 has f32's range).
//   fp16: the same in f16, plus dynamic loss scaling: the loss is multiplied by the scale before
//         backward and the gradients divided by it (in f32) before clipping. A step whose
//         gradients hold inf/NaN anywhere (agreed across ranks) is skipped and the scale halved;
//         after `growth_interval` clean steps in a row the scale doubles. The scale never goes
//         below `min_scale`; the first time it would, one warning is printed (the run is then
//         likely diverging in f16 — try bf16).
// The loss itself (cross-entropy) is always computed in f32 from the logits.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/enum_names.h"
#include "tensor/dtype.h"

namespace st::runtime {

enum class Precision { fp32, fp16, bf16 };
template <>
struct EnumNames<Precision> {
  static constexpr std::array<EnumName<Precision>, 3> table{
      {{Precision::fp32, "fp32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}}};
};
DType compute_dtype(Precision p);  // f32 | f16 | bf16

class LossScaler {
 public:
  // Disabled (scale 1, never skips) unless `enabled`.
  explicit LossScaler(bool enabled, double init_scale = 65536.0, int64_t growth_interval = 2000,
                      double min_scale = 1.0);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  int64_t growth_interval() const { return growth_interval_; }
  double min_scale() const { return min_scale_; }
  // After the step's inf/NaN check: returns true when the step must be skipped.
  bool update(bool found_inf);
  // Checkpoint state.
  void set_state(double scale, int64_t good_steps);
  bool warned_at_floor() const { return warned_; }
  // An overflow now could not halve the scale any more (the scale is at its floor).
  bool at_floor() const { return enabled_ && scale_ * 0.5 < min_scale_; }

 private:
  bool enabled_;
  double scale_;
  int64_t growth_interval_;
  double min_scale_;
  int64_t good_steps_ = 0;
  bool warned_ = false;
};

}  // namespace st::runtime
