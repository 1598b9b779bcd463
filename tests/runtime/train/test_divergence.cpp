// DivergenceGuard (runtime/train/divergence.h) in closed form: the ratio against the running mean
// (K in a row, a shorter spike passes and resets), the mean counted as at least 1 (a run near
// loss 0 is not stopped by a batch at 0.5), the zero-gradient count (N in a row, a non-zero norm
// resets it), each off at 0, and the defaults a run gets (ratio 100, K 3, N 3).
#include <gtest/gtest.h>

#include <string>

#include "runtime/optim/precision_options.h"
#include "runtime/train/divergence.h"
#include "tensor/error.h"

using st::ValueError;
using st::runtime::DivergenceGuard;

namespace {

// observe() at step `step`: the line it throws, "" when it does not
std::string line(DivergenceGuard& g, int64_t step, double loss, double norm) {
  try {
    g.observe(step, loss, norm);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Divergence, TheDefaultsAreOnWithALargeRatio) {
  const st::runtime::PrecisionOptions d;
  EXPECT_EQ(d.max_loss_ratio, 100.0);
  EXPECT_EQ(d.loss_ratio_steps, 3);
  EXPECT_EQ(d.max_zero_grad_steps, 3);
}

TEST(Divergence, ThreeStepsAboveTheRatioStopTheRun) {
  DivergenceGuard g(100, 3, 3);
  EXPECT_EQ(line(g, 1, 5.0, 1.0), "");  // the mean starts at 5
  EXPECT_EQ(line(g, 2, 600.0, 1.0), "");
  EXPECT_EQ(line(g, 3, 600.0, 1.0), "");  // two above 500: a spike passes
  EXPECT_EQ(line(g, 4, 5.0, 1.0), "");    // below: the count starts again, the mean stays 5
  EXPECT_EQ(g.mean(), 5.0);
  EXPECT_EQ(line(g, 5, 600.0, 1.0), "");
  EXPECT_EQ(line(g, 6, 600.0, 1.0), "");
  EXPECT_EQ(line(g, 7, 600.0, 2.5),
            "step 7: loss 600 is above 100 × its running mean 5 for 3 steps in a row (grad norm 2.5); the run diverged "
            "— see --max-loss-ratio");
}

TEST(Divergence, TheMeanCountsAsAtLeastOne) {
  DivergenceGuard g(100, 1, 0);
  EXPECT_EQ(line(g, 1, 0.01, 1.0), "");
  EXPECT_EQ(line(g, 2, 0.5, 1.0), "");   // 50 × the mean, but below 100 × 1
  EXPECT_EQ(line(g, 3, 99.0, 1.0), "");  // below 100 × 1; folded in: the mean 0.059 + 9.9…
  DivergenceGuard h(100, 1, 0);
  EXPECT_EQ(line(h, 1, 0.01, 1.0), "");
  EXPECT_EQ(line(h, 2, 101.0, 1.0),
            "step 2: loss 101 is above 100 × its running mean 0.01, counted as 1, for 1 step (grad norm 1); the run "
            "diverged — see --max-loss-ratio");
}

TEST(Divergence, AGradientNormOfExactlyZeroForNStepsStopsTheRun) {
  DivergenceGuard g(0, 3, 3);  // the ratio off: only the norm
  EXPECT_EQ(line(g, 1, 4.0, 0.0), "");
  EXPECT_EQ(line(g, 2, 4.0, 0.0), "");
  EXPECT_EQ(line(g, 3, 4.0, 1e-30), "");  // not exactly 0: the count starts again
  EXPECT_EQ(line(g, 4, 4.0, 0.0), "");
  EXPECT_EQ(line(g, 5, 4.0, 0.0), "");
  EXPECT_EQ(line(g, 6, 4.15888, 0.0),
            "step 6: the gradient norm is exactly 0 for 3 steps in a row (loss 4.15888); nothing learns any more (the "
            "run diverged into saturation, or its gradients vanished) — see --max-zero-grad-steps");
  DivergenceGuard off(0, 3, 0);
  for (int64_t s = 1; s <= 10; ++s) EXPECT_EQ(line(off, s, 4.0, 0.0), "");
  EXPECT_THROW(DivergenceGuard(100, 3, -1), ValueError);
  EXPECT_THROW(DivergenceGuard(1, 3, 3), ValueError);
}
