// Stopping a run whose loss left its running mean (see the header).
#include "runtime/train/divergence.h"

#include <sstream>

#include "tensor/error.h"

namespace st::runtime {
namespace {
constexpr double kWeight = 0.1;  // of the newest accepted loss in the running mean
}  // namespace

DivergenceGuard::DivergenceGuard(double ratio, int64_t steps) : ratio_(ratio), steps_(steps) {
  ST_CHECK(ratio == 0 || ratio > 1, ValueError, "--max-loss-ratio must be 0 (off) or > 1, got " << ratio);
  ST_CHECK(steps >= 1, ValueError, "--loss-ratio-steps must be >= 1, got " << steps);
}

void DivergenceGuard::observe(int64_t step, double loss, double grad_norm) {
  if (ratio_ == 0) return;
  if (!started_) {
    mean_ = loss;
    started_ = true;
    return;
  }
  if (!(loss > ratio_ * mean_)) {
    in_a_row_ = 0;
    mean_ += kWeight * (loss - mean_);
    return;
  }
  if (++in_a_row_ < steps_) return;
  std::ostringstream o;
  o << "step " << step << ": loss " << loss << " is above " << ratio_ << " × its running mean " << mean_ << " for "
    << in_a_row_ << (in_a_row_ == 1 ? " step" : " steps in a row") << " (grad norm " << grad_norm
    << "); the run diverged — see --max-loss-ratio";
  throw ValueError(o.str());
}

}  // namespace st::runtime
