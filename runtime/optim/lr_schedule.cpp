#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>


namespace st::runtime {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (kind == LrScheduleKind::constant) return lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup - 1);
  const double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(span), 0.0, 1.0);
  const double min_lr = min_lr_ratio * lr;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace st::runtime
