// PipelineGradientSource: one step's forward/backward over a pipeline stage, running the step
// list of a PipelinePlan (runtime/pipeline/pipeline_schedule.h: GPipe, 1F1B or interleaved 1F1B).
// Replaces LocalGradientSource when pp > 1.
//
// Every stage reads the step's micro-batches of its DP replica (the model's first chunk needs
// the inputs, the last the targets; reading is cheap). Under context parallelism (layout.cp > 1)
// it keeps this rank's two chunks of each sequence, inputs and targets alike, as
// LocalGradientSource does (context_shard): T below is then the rank's T/cp tokens, the model's
// attention a ring over the cp group, and the pp group is the stages of the same (dp, cp, tp)
// position, so a stage passes its chunks' activations to the next stage at the same cp index. The
// cp ranks of a stage run the same plan in step, so each ring's point-to-point calls (on the cp
// communicator) are matched whatever the pipeline's (on the pp one). Activations (B, T, C) travel to the next
// model chunk and their gradients back by point-to-point: each step's group of sends and
// receives is posted as ONE batch_p2p and waited for before the step's compute action, so the
// executor is correct under rendezvous semantics (NCCL; MPI with SHARDTRAIN_P2P=strict: a send
// completes only when the peer's receive is posted), which the all-stage simulation in
// tests/runtime/pipeline proves deadlock-free. When a group completes its send buffers are
// dropped, and a sent input gradient releases the micro-batch's input: a (micro-batch, chunk)
// holds memory from its first action to its last, and the executor throws if more pairs are held
// than the plan's in-flight bound. Tags: pipe_tag (chunks distinguished); one shape handshake per
// chunk at the first step, on kPipeShapeTag.
//
// The model's last chunk multiplies each micro-batch's mean loss by the step's loss factor
// (loss_scale/(K·dp·cp)) as LocalGradientSource does, so the gradients are those of the global-batch
// mean whatever the layout, and adds the unscaled means to the step state in micro-batch order. The gradient sync's last_backward() runs just before the step's final backward action
// (with several chunks a bucket whose gradients were final earlier goes out in finish()).
//
// evaluate() is forward only: each validation batch of the replica (GradientSource) passes
// through the model chunks in model order — chunk c of stage s is model chunk c·p + s — each
// hop one batch_p2p of one message (RecvAct before the chunk's forward, SendAct after), tagged
// with pipe_tag of (the replica's batch number, chunk). Every stage handles the model chunks in
// increasing order and each message is the next one its receiver waits for, so the hops form
// one chain: no two groups wait on each other under rendezvous. The model's last chunk takes
// the loss; only it (on tp rank 0) returns a share, as in training (cp ranks: each its chunks'
// share divided by cp).
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
  double wait_ms = 0;     // time blocked in point-to-point groups (the bubble seen by this stage)
  int64_t peak_in_flight = 0;  // (micro-batch, chunk) pairs holding activations, at most
  int64_t peak_activation_bytes = 0;  // CPU bytes in use at the peak, above the step's start
};

class PipelineGradientSource : public GradientSource {
 public:
  // `plan` is this stage's (make_plan with the stage's pp rank, K = layout.grad_accum and the
  // stage's number of chunks); the stage model's chunks are the ones the actions name.
  PipelineGradientSource(std::shared_ptr<StageModel> stage, std::shared_ptr<const TokenSource> data, BatchLayout layout,
                         Device device, std::shared_ptr<comm::Communicator> pp_group, PipelinePlan plan,
                         bool count_loss);
  void compute_gradients(const StepContext& ctx, GradientSync& sync) override;
  std::string capture_refusal() const override { return "a pipeline's gradient source"; }
  int64_t micro_batches() const override { return layout_.grad_accum; }
  double evaluate(const TokenSource& val, int64_t batches) override;
  int64_t global_batch() const override { return layout_.global_batch(); }
  int64_t seq_len() const override { return layout_.seq_len; }
  const PipelineStats& stats() const { return stats_; }

 private:
  // One (micro-batch, chunk) pair's tensors during a step.
  struct Slot {
    TokenBatch batch;    // on the model's first chunk (inputs) and last chunk (targets), (B, T/cp)
    Tensor input;        // received activation (B, T/cp, C), a leaf that requires grad
    Tensor output;       // chunk output (B, T, C), or the scaled loss () on the model's last chunk
    Tensor grad_output;  // received gradient of output (B, T, C)
    bool held = false;   // counted in StepState::held
  };
  // The step being run: what the actions read and write.
  struct StepState {
    int64_t step = 0;
    Tensor factor;        // () f32: loss_scale / (K · dp · cp)
    std::vector<Slot> slots;  // (micro-batch mb, chunk c) at mb · v + c
    Tensor losses;            // (K,) f32 unscaled micro-batch means (the model's last chunk)
    size_t mem0 = 0;          // CPU bytes in use when the step began
    int64_t held = 0;         // slots holding a tensor
  };
  void agree_shapes();  // the input shape and dtype of each chunk, once
  // One group: posted as one batch_p2p, waited for, send buffers and sent-from inputs dropped.
  void communicate(StepState& st, const std::vector<PipeAction>& group);
  void forward(StepState& st, const PipeAction& a);
  void backward(StepState& st, const PipeAction& a);
  Slot& slot(StepState& st, const PipeAction& a) const;
  void update_held(StepState& st, Slot& s) const;
  void check_bound(StepState& st, const std::vector<PipeAction>& after);  // after a group or a compute action
  bool first_chunk(int c) const { return pp_->rank() == 0 && c == 0; }
  bool last_chunk(int c) const { return pp_->rank() == pp_->size() - 1 && c == chunks_ - 1; }

  std::shared_ptr<StageModel> stage_;
  std::shared_ptr<const TokenSource> data_;
  BatchLayout layout_;
  Device device_;
  std::shared_ptr<comm::Communicator> pp_;
  PipelinePlan plan_;
  int chunks_;
  size_t last_backward_ = 0;  // step of the final Backward
  bool count_loss_;
  PipelineStats stats_;
  std::vector<Shape> in_shape_;  // per chunk: what it receives, (B, T/cp, C), agreed at the first step
  std::vector<DType> in_dtype_;  // ... in the compute dtype
};

}  // namespace st::runtime
