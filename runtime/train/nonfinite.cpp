// Stopping on non-finite steps; the finite check of loaded state (see the header).
#include "runtime/train/nonfinite.h"

#include <cmath>
#include <sstream>

#include "ops/optim.h"

namespace st::runtime {
namespace {
std::string show(double x) {  // "nan", "inf", "-inf" (never glibc's "-nan")
  if (std::isnan(x)) return "nan";
  std::ostringstream o;
  o << x;
  return o.str();
}
}  // namespace

NonFiniteGuard::NonFiniteGuard(Precision precision, int64_t max_steps) : precision_(precision), max_steps_(max_steps) {
  ST_CHECK(max_steps >= 0, ValueError, "--max-nonfinite-steps must be >= 0, got " << max_steps);
}

void NonFiniteGuard::nonfinite(int64_t step, double loss, bool grads_nonfinite, bool scale_at_floor) {
  const bool fp16 = precision_ == Precision::fp16;
  if (fp16 && !scale_at_floor) {  // the scaler deals with it: the scale halves
    in_a_row_ = 0;
    return;
  }
  if (in_a_row_++ == 0) first_ = step;
  if (max_steps_ == 0 || in_a_row_ < max_steps_) return;
  std::ostringstream o;
  o << "step " << step << ": ";
  if (fp16)
    o << "the gradients still overflow with the fp16 loss scale at its floor (try --precision bf16)";
  else if (grads_nonfinite)
    o << "the gradients hold inf/NaN (" << to_string(precision_) << " has no loss scaler to skip it)";
  else
    o << "loss is " << show(loss) << " (" << to_string(precision_) << " has no loss scaler to skip it)";
  o << "; stopping after " << in_a_row_ << " non-finite step" << (in_a_row_ == 1 ? "" : "s");
  if (in_a_row_ > 1) o << " in a row (steps " << first_ << "-" << step << ")";
  o << " — see --max-nonfinite-steps";
  throw ValueError(o.str());
}

}  // namespace st::runtime
