// Non-finite numbers in a run: the rule that stops a run that has gone inf/NaN instead of
// training on to exit 0 (the check that loaded state is finite: runtime/parallel/state_io.h).
//
// A step is non-finite when any rank's gradients hold inf/NaN (the flag is agreed by every rank)
// or the global loss is inf/NaN. Such a step never reaches the optimizer: fp16's loss scaler
// skips it and halves the scale (runtime/optim/mixed_precision.h); fp32 and bf16 have no scale
// to lower, so the step is skipped as well and counted. `max_steps` non-finite steps in a row
// (TrainConfig::max_nonfinite_steps, default 1: without a scale to lower, an inf/NaN in fp32 or
// bf16 is a diverged run or bad data, not a transient overflow — Megatron-LM's default also
// stops on the first NaN) end the run with one line:
//   step 7: loss is nan (fp32 has no loss scaler to skip it); stopping after 1 non-finite step — see --max-nonfinite-steps
// In fp16 an overflow is normal while the scale comes down; only overflows with the scale at
// its floor (it cannot halve any more) count. 0: never stop (every such step is skipped).
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/named_tensors.h"
#include "runtime/optim/mixed_precision.h"

namespace st::runtime {

class NonFiniteGuard {
 public:
  NonFiniteGuard(Precision precision, int64_t max_steps);
  // After step `step` (from 1) was found non-finite (`grads_nonfinite`: some rank's gradients;
  // else the loss). fp16: `scale_at_floor` says whether the scale could not halve. Throws
  // ValueError with the one-line cause when this makes max_steps in a row.
  void nonfinite(int64_t step, double loss, bool grads_nonfinite, bool scale_at_floor = false);
  void finite() { in_a_row_ = 0; }  // a step the optimizer took
  int64_t in_a_row() const { return in_a_row_; }

 private:
  Precision precision_;
  int64_t max_steps_;
  int64_t in_a_row_ = 0;
  int64_t first_ = 0;  // the first step of the current run of non-finite steps
};

}  // namespace st::runtime
