// Divergence without inf/NaN: a run whose loss climbs to 1e13 with finite numbers, or one that
// diverged into saturation and sits at grad norm exactly 0 and loss ln(vocab), trains on to exit
// 0 unless something watches the loss itself. DivergenceGuard watches both, on by default:
//
// The ratio (--max-loss-ratio R, default 100; 0: off) stops a run whose loss exceeds R × its
// running mean for K steps in a row (--loss-ratio-steps K, default 3), with one line:
//   step 9: loss 7.2e+13 is above 10 × its running mean 5.51 for 3 steps in a row (grad norm 1.1e+32); the run diverged — see --max-loss-ratio
// The running mean is an exponential moving average of the losses the guard accepted (weight 0.1
// on the newest: about the last ten steps), started by the run's first step (a resumed run's
// first step after the checkpoint: it is not saved). The bar is R × max(mean, 1): a run that
// memorised its data to a loss near 0 is not stopped by a batch at loss 0.5 (the line then says
// "its running mean 0.02, counted as 1"). A step above the bar is not folded into the mean, so a
// spike cannot raise the bar it is measured against; a spike shorter than K steps passes (a bad
// batch), and the count starts again at the next step below the bar. Why K = 3: one or two steps
// far above the mean happen in healthy runs (an unlucky batch, the first steps after a resume);
// three in a row at R ≥ 2 are a run that left its basin. Why R = 100 by default: a healthy run's
// loss starts near ln(vocab) and falls; 100 × its mean is far outside anything a healthy run
// does, and every diverged run seen (loss 1e13, 8.7e13 under dp) is far above it.
//
// The zero gradient (--max-zero-grad-steps N, default 3; 0: off) stops a run whose global
// gradient norm is exactly 0 for N steps in a row — nothing can learn any more:
//   step 4: the gradient norm is exactly 0 for 3 steps in a row (loss 5.545); nothing learns any more (the run diverged into saturation, or its gradients vanished) — see --max-zero-grad-steps
// A healthy run's norm is a sum of squares of millions of rounded numbers: it is never exactly 0.
//
// Skipped steps (inf/NaN: runtime/train/nonfinite.h) are not seen. Every rank sees the same
// global loss and norm, so every rank stops at the same step.
#pragma once
#include <cstdint>

namespace st::runtime {

class DivergenceGuard {
 public:
  // ratio 0: off, else > 1. steps: K ≥ 1. zero_grad_steps: N ≥ 0 (0: off).
  DivergenceGuard(double ratio = 0, int64_t steps = 3, int64_t zero_grad_steps = 0);
  // After step `step` (from 1), one the optimizer took. Throws ValueError with a line above when
  // it makes K in a row above the bar, or N in a row at grad norm 0.
  void observe(int64_t step, double loss, double grad_norm);
  double mean() const { return mean_; }
  int64_t above_in_a_row() const { return in_a_row_; }

 private:
  double ratio_;
  int64_t steps_;
  int64_t zero_grad_steps_;
  double mean_ = 0;
  bool started_ = false;
  int64_t in_a_row_ = 0;
  int64_t zero_in_a_row_ = 0;
};

}  // namespace st::runtime
