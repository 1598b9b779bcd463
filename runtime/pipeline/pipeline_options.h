// PipelineOptions: the pipeline axis — stages, the schedule, model chunks per stage and how layers
// are cut into stages (the pipeline flags of --help). validate() holds the schedule's own rules;
// those that need the model (stages vs layers) are the run config's (runtime/setup/train_config.h).
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"
#include "runtime/common/partition.h"
#include "runtime/pipeline/pipeline_schedule.h"

namespace st::runtime {

struct PipelineOptions {
  int64_t pp = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int64_t virtual_stages = 1;  // model chunks per pipeline stage (interleaved schedule: ≥ 2)
  PartitionKind partition = PartitionKind::params;

  // micro_batches: K, the pipeline's m. The interleaved schedule needs v >= 2 chunks per stage and m
  // a multiple of pp; the other schedules one chunk. A pipeline's micro-batches must keep their tags
  // in the tag space MPI guarantees (runtime/pipeline/pipeline_schedule.h).
  void validate(const OptionFail& fail, int64_t micro_batches) const {
    require_positive(fail, "pp", static_cast<double>(pp));
    const std::string v = std::to_string(virtual_stages), p = std::to_string(pp), k = std::to_string(micro_batches);
    if (schedule == Schedule::interleaved) {
      if (virtual_stages < 2) fail("virtual-stages", "--schedule interleaved needs 2 or more, got " + v);
      if (micro_batches % pp != 0) fail("grad-accum", "--schedule interleaved needs a multiple of --pp " + p + ", got " + k);
    } else if (virtual_stages != 1) {
      fail("virtual-stages", "only --schedule interleaved holds several chunks per stage; --schedule " +
                                 to_string(schedule) + " needs 1, got " + v);
    }
    if (pp > 1) {
      const int limit = max_pipeline_micro_batches(static_cast<int>(virtual_stages));
      if (micro_batches > limit)
        fail("grad-accum", "at most " + std::to_string(limit) + " micro-batches per step in a pipeline" +
                               (virtual_stages > 1 ? " of " + v + " chunks per stage" : std::string()) +
                               " (its message tags must stay below 32767), got " + k);
    }
  }
};

}  // namespace st::runtime
