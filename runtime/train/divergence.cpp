// Stopping a run whose loss left its running mean, or whose gradients are exactly 0 (see the header).
#include "runtime/train/divergence.h"

#include <algorithm>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {
namespace {
constexpr double kWeight = 0.1;     // of the newest accepted loss in the running mean
constexpr double kMeanFloor = 1.0;  // the bar is ratio × max(mean, this), in nats
}  // namespace

DivergenceGuard::DivergenceGuard(double ratio, int64_t steps, int64_t zero_grad_steps)
    : ratio_(ratio), steps_(steps), zero_grad_steps_(zero_grad_steps) {
  ST_CHECK(ratio == 0 || ratio > 1, ValueError, "--max-loss-ratio must be 0 (off) or > 1, got " << ratio);
  ST_CHECK(steps >= 1, ValueError, "--loss-ratio-steps must be >= 1, got " << steps);
  ST_CHECK(zero_grad_steps >= 0, ValueError, "--max-zero-grad-steps must be >= 0, got " << zero_grad_steps);
}

void DivergenceGuard::observe(int64_t step, double loss, double grad_norm) {
  if (zero_grad_steps_ > 0) {
    zero_in_a_row_ = grad_norm == 0.0 ? zero_in_a_row_ + 1 : 0;
    if (zero_in_a_row_ >= zero_grad_steps_) {
      std::ostringstream o;
      o << "step " << step << ": the gradient norm is exactly 0 for " << zero_in_a_row_
        << (zero_in_a_row_ == 1 ? " step" : " steps in a row") << " (loss " << loss
        << "); nothing learns any more (the run diverged into saturation, or its gradients vanished) — see "
           "--max-zero-grad-steps";
      throw ValueError(o.str());
    }
  }
  if (ratio_ == 0) return;
  if (!started_) {
    mean_ = loss;
    started_ = true;
    return;
  }
  if (!(loss > ratio_ * std::max(mean_, kMeanFloor))) {
    in_a_row_ = 0;
    mean_ += kWeight * (loss - mean_);
    return;
  }
  if (++in_a_row_ < steps_) return;
  std::ostringstream o;
  o << "step " << step << ": loss " << loss << " is above " << ratio_ << " × its running mean " << mean_
    << (mean_ < kMeanFloor ? ", counted as 1," : "") << " for " << in_a_row_
    << (in_a_row_ == 1 ? " step" : " steps in a row") << " (grad norm " << grad_norm
    << "); the run diverged — see --max-loss-ratio";
  throw ValueError(o.str());
}

}  // namespace st::runtime
