// Mixed precision: fp32 | fp16 | bf16 | fp8 (all four on CPU and GPU; fp8's GEMMs emulated on the CPU).
//   fp32: parameters, activations and gradients in f32.
//   bf16: the model's parameters (hence activations and gradients) in bf16; f32 master weights
//         in the optimizer (runtime/optim/optimizer.h); no loss scaling (bf16 has f32's range).
//   fp16: the same in f16, plus dynamic loss scaling: the loss is multiplied by the scale before
//         backward and the gradients divided by it (in f32) before clipping. A step whose
//         gradients hold inf/NaN anywhere (agreed across ranks) is skipped and the scale halved;
//         after `growth_interval` clean steps in a row the scale doubles. The scale never goes
//         below `min_scale`; the first time it would, one warning is printed (the run is then
//         likely diverging in f16 — try bf16).
//   fp8:  bf16 as above, plus the decoder blocks' linear GEMMs (qkv, o, MLP up / gate+up, down) in
//         FP8 through ops::fp8_linear (E4M3 weights, activations and gradients, per-tensor
//         scaling: current by default, tests/bench/bench_fp8_error's choice; delayed with
//         --fp8-scaling delayed); the model's parameters stay bf16 (the
//         f32 masters in the optimizer) and are cast to FP8 at use. Embeddings, attention, norms
//         and the head stay bf16. Only the decoder families have the FP8 path
//         (ModelForm::fp8: the model is built with them); no loss scaling.
// The loss itself (cross-entropy) is always computed in f32 from the logits.
#pragma once
#include <cstdint>
#include <string>

#include "ops/fp8_linear.h"
#include "runtime/common/enum_names.h"
#include "tensor/dtype.h"

namespace st::runtime {

enum class Precision { fp32, fp16, bf16, fp8 };
template <>
struct EnumNames<Precision> {
  static constexpr std::array<EnumName<Precision>, 4> table{
      {{Precision::fp32, "fp32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}, {Precision::fp8, "fp8"}}};
};
template <>
struct EnumNames<ops::Fp8ScaleMode> {
  static constexpr std::array<EnumName<ops::Fp8ScaleMode>, 2> table{
      {{ops::Fp8ScaleMode::current, "current"}, {ops::Fp8ScaleMode::delayed, "delayed"}}};
};
// fp8's recipe for the block GEMMs: E4M3 gradients (bench_fp8_error: E4M3's extra mantissa bit
// halves the gradient GEMMs' error, and with current scaling E5M2's extra range buys nothing —
// the scale always fits the tensor), power-of-two s, and the scaling --fp8-scaling picks:
//   current  (the default) s from the tensor being cast: no amax history to carry, never
//            saturates; recompute re-derives the same s
//   delayed  Transformer Engine's recipe (ops/fp8_scaling.h): the casts use the s of the last
//            update and record their amax; after each optimizer step the trainer max-reduces
//            every layer's amaxes over the dp × tp ranks of its stage (one all-reduce) and
//            updates the scales from a history of `history` amaxes (runtime/train/fp8_delayed.h);
//            the histories are checkpointed (optimizer file, keys "fp8.<layer>.<gemm>.<x|w|grad>")
ops::Fp8LinearOptions fp8_training_recipe(ops::Fp8ScaleMode mode = ops::Fp8ScaleMode::current, int64_t history = 16);

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
