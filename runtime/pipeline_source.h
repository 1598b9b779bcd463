// PipelineGradientSource: one step's forward/backward over a pipeline stage, running a schedule
// from runtime/pipeline_schedule.h (GPipe or 1F1B). Replaces LocalGradientSource when pp > 1.
//
// Every stage reads the step's micro-batches of its DP replica (the first stage needs the
// inputs, the last the targets; reading is cheap). Activations (B, T, C) travel to the next
// stage and their gradients back, by batched point-to-point: each run of consecutive
// communication actions posts its sends and receives together; receives are waited for at once,
// sends only at the end of the step (they never block a stage, so the schedule's pairing cannot
// deadlock — see the simulation in tests/pipeline). Tags: 2·mb for activations, 2·mb + 1 for
// gradients.
//
// The last stage scales each micro-batch's mean loss by loss_scale/(K·dp) as LocalGradientSource
// does, so the gradients are those of the global-batch mean whatever the layout. `on_last_backward`
// runs just before the step's final backward action (the DP reducer turns sync on there).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/gradient_source.h"
#include "runtime/pipeline_schedule.h"
#include "runtime/stage_model.h"

namespace st::runtime {

struct PipelineStats {
  double compute_ms = 0;  // forward + backward time of this stage in the last step
  double wait_ms = 0;     // time blocked in receives (the bubble seen by this stage)
  int64_t peak_in_flight = 0;  // micro-batches forwarded and not yet backpropagated, at most
  int64_t peak_activation_bytes = 0;  // CPU bytes in use at the peak, above the step's start
};

class PipelineGradientSource : public GradientSource {
 public:
  PipelineGradientSource(std::shared_ptr<StageModel> stage, std::shared_ptr<const TokenData> data, BatchLayout layout,
                         Device device, std::shared_ptr<comm::Communicator> pp_group, std::string schedule,
                         bool count_loss);
  double compute_gradients(int64_t step, double loss_scale) override;
  int64_t global_batch() const override { return layout_.global_batch(); }
  int64_t seq_len() const override { return layout_.seq_len; }
  void set_on_last_backward(std::function<void()> fn) { on_last_backward_ = std::move(fn); }
  const PipelineStats& stats() const { return stats_; }

 private:
  Shape activation_shape() const;  // what this stage receives: (B, T, C) in the compute dtype
  std::shared_ptr<StageModel> stage_;
  std::shared_ptr<const TokenData> data_;
  BatchLayout layout_;
  Device device_;
  std::shared_ptr<comm::Communicator> pp_;
  std::vector<PipeAction> actions_;
  bool count_loss_;
  std::function<void()> on_last_backward_;
  PipelineStats stats_;
  Shape recv_shape_;
  DType act_dtype_ = DType::f32;
};

}  // namespace st::runtime
