#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <numbers>

namespace st::runtime {
namespace {

// cos(π·p) for p in [0, 1] from +, −, × and ÷ alone: libm's cos comes in CPU-chosen variants that
// differ in the last bit (docs/testing.md, "CPU numerics"), so a resumed or copied run could draw
// another lr. Folded to an argument x ≤ π/4, where the Taylor series to x²⁰ is exact to below
// 1e-17 relative; evaluated by Horner in a fixed order.
double series(double x, bool sine) {
  const double x2 = x * x;
  double acc = 0.0;
  for (int n = sine ? 21 : 20; n >= 2; n -= 2) acc = 1.0 - acc * x2 / (static_cast<double>(n) * (n - 1));
  return sine ? x * acc : acc;
}

double cos_pi(double p) {
  double sign = 1.0;
  if (p > 0.5) {  // cos(πp) = −cos(π(1 − p))
    p = 1.0 - p;
    sign = -1.0;
  }
  if (p > 0.25) return sign * series(std::numbers::pi * (0.5 - p), /*sine=*/true);  // = sin(π(1/2 − p))
  return sign * series(std::numbers::pi * p, /*sine=*/false);
}

}  // namespace

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (kind == LrScheduleKind::constant) return lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup - 1);
  const double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(span), 0.0, 1.0);
  const double min_lr = min_lr_ratio * lr;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos_pi(progress));
}

}  // namespace st::runtime
