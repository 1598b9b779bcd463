// Learning-rate schedules, as a pure function of the step (so a resumed run gets the same lr).
//   const:  lr (after the warm-up)
//   cosine: lr·0.5·(1 + cos(π·progress)) scaled into [min_lr_ratio·lr, lr], progress from 0 at
//           the end of the warm-up to 1 at the last step.
// Warm-up (both): linear, lr·(s + 1)/warmup for steps s < warmup. Steps s count from 0.
#pragma once
#include <cstdint>

#include "runtime/common/enum_names.h"

namespace st::runtime {

enum class LrScheduleKind { constant, cosine };
template <>
struct EnumNames<LrScheduleKind> {
  static constexpr std::array<EnumName<LrScheduleKind>, 2> table{
      {{LrScheduleKind::constant, "const"}, {LrScheduleKind::cosine, "cosine"}}};
};

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double lr = 1e-3;
  int64_t warmup = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;
  double at(int64_t step) const;  // the lr of step `step` (from 0)
};

}  // namespace st::runtime
