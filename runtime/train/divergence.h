// Divergence without inf/NaN: a run whose loss climbs to 1e13 with finite numbers trains on to
// exit 0 unless something watches the loss itself. DivergenceGuard (--max-loss-ratio R, off by
// default) stops a run whose loss exceeds R × its running mean for K steps in a row
// (--loss-ratio-steps K, default 3), with one line:
//   step 9: loss 7.2e+13 is above 10 × its running mean 5.51 for 3 steps in a row (grad norm 1.1e+32); the run diverged — see --max-loss-ratio
// The running mean is an exponential moving average of the losses the guard accepted (weight 0.1
// on the newest: about the last ten steps), started by the run's first step (a resumed run's
// first step after the checkpoint: it is not saved). A step above R × the mean is not folded
// into it, so a spike cannot raise the bar it is measured against; a spike shorter than K steps
// passes (a bad batch), and the count starts again at the next step below the bar. Why K = 3: one
// or two steps far above the mean happen in healthy runs (an unlucky batch, the first steps
// after a resume); three in a row at R ≥ 2 are a run that left its basin. Skipped steps
// (inf/NaN: runtime/train/nonfinite.h) are not seen. Every rank sees the same global loss, so
// every rank stops at the same step.
#pragma once
#include <cstdint>

namespace st::runtime {

class DivergenceGuard {
 public:
  // ratio 0: off. steps: K ≥ 1.
  DivergenceGuard(double ratio = 0, int64_t steps = 3);
  // After step `step` (from 1), one the optimizer took. Throws ValueError with the line above
  // when it makes K in a row above the bar.
  void observe(int64_t step, double loss, double grad_norm);
  double mean() const { return mean_; }
  int64_t above_in_a_row() const { return in_a_row_; }

 private:
  double ratio_;
  int64_t steps_;
  double mean_ = 0;
  bool started_ = false;
  int64_t in_a_row_ = 0;
};

}  // namespace st::runtime
