// PipelineGradientSource: one step's forward/backward over a pipeline stage, running a schedule
// from runtime/pipeline/pipeline_schedule.h (GPipe or 1F1B). Replaces LocalGradientSource when
// pp > 1.
//
// Every stage reads the step's micro-batches of its DP replica (the first stage needs the
// inputs, the last the targets; reading is cheap). Activations (B, T, C) travel to the next
// stage and their gradients back, by batched point-to-point: each run of consecutive
// communication actions posts its sends and receives together; receives are waited for at once,
// sends only at the end of the step (they never block a stage, so the schedule's pairing cannot
// deadlock — see the simulation in tests/runtime/pipeline). Tags: 2·mb for activations,
// 2·mb + 1 for gradients.
//
// The last stage scales each micro-batch's mean loss by loss_scale/(K·dp) as LocalGradientSource
// does, so the gradients are those of the global-batch mean whatever the layout. The gradient
// sync's last_backward() runs just before the step's final backward action.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/pipeline/pipeline_schedule.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/train/gradient_source.h"

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
                         Device device, std::shared_ptr<comm::Communicator> pp_group, Schedule schedule,
                         bool count_loss);
  double compute_gradients(int64_t step, double loss_scale, GradientSync& sync) override;
  int64_t global_batch() const override { return layout_.global_batch(); }
  int64_t seq_len() const override { return layout_.seq_len; }
  const PipelineStats& stats() const { return stats_; }

 private:
  // One micro-batch's state on this stage during a step.
  struct Micro {
    TokenBatch batch;
    Tensor input;        // received activation (leaf, requires grad), or token ids
    Tensor output;       // stage output (non-last) or scaled loss (last)
    Tensor grad_output;  // received gradient of output
  };
  // The step being run: what the actions read and write.
  struct StepState {
    int64_t step = 0;
    double factor = 1.0;  // loss_scale / (K · dp)
    std::vector<Micro> mbs;
    std::vector<comm::WorkPtr> pending_sends;
    std::vector<Tensor> losses;  // unscaled micro-batch means (last stage), () f32 each
    size_t mem0 = 0;             // CPU bytes in use when the step began
    int64_t in_flight = 0;
  };
  // Actions [i, j) are consecutive communication actions: posted as one batch; receives waited.
  void communicate(StepState& st, size_t i, size_t j);
  void forward(StepState& st, int mb);
  void backward(StepState& st, int mb);
  void load(StepState& st, int mb);  // micro-batch mb's tokens, once

  std::shared_ptr<StageModel> stage_;
  std::shared_ptr<const TokenData> data_;
  BatchLayout layout_;
  Device device_;
  std::shared_ptr<comm::Communicator> pp_;
  std::vector<PipeAction> actions_;
  bool count_loss_;
  PipelineStats stats_;
  Shape recv_shape_;            // what this stage receives: (B, T, C), agreed at the first step
  DType act_dtype_ = DType::f32;  // ... in the compute dtype
};

}  // namespace st::runtime
