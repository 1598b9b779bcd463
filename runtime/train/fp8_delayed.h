// Fp8DelayedScaling: --fp8-scaling delayed in the training step — once per optimizer step, after
// the update, every FP8 GEMM's three amaxes (x, w, grad: what the step's casts recorded since the
// last update, ops/fp8_scaling.h) are max-reduced over the ranks of this rank's pipeline stage
// (its dp × tp ranks: each sees other sequences or another shard of the same layers, and all must
// scale alike or the replicas drift apart; the stages hold different layers, so never across
// them), then each state rolls its history and sets its next scale (ops::fp8_scaling_update of all of
// them: one launch on CUDA).
//
//   update()   one process: the updates only — device kernels in stream order, no host read,
//              so the captured step (runtime/train/train_step.h) replays them. Several: the
//              amaxes of every GEMM gathered into one (3·L) f32 buffer, ONE all-reduce(max) over
//              the stage's group, scattered back, then the updates (the step is eager there).
//              The max of the ranks' maxes is the max over the whole batch and the whole weight,
//              which is what one process records: layouts scale exactly as one process does.
//
// Checkpoints: each state's buffer (s, s⁻¹, the amax since the update (0 after it), the history:
// (3 + N) f32) under "fp8.<gemm's full name>.<x|w|grad>" in the optimizer part. The states are
// equal on every dp and tp rank of a stage (the reduction above), so each is written once, by dp 0
// / tp 0 of its stage (written_here); the stages name different layers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

constexpr const char* kFp8KeyPrefix = "fp8.";  // the checkpoint keys' prefix

class Fp8DelayedScaling {
 public:
  // states: the model's (LanguageModel::fp8_named_states()); group: this rank's stage's dp × tp
  // ranks (null or one rank: none).
  Fp8DelayedScaling(LanguageModel::NamedFp8States states, std::shared_ptr<comm::Communicator> group);
  void update();
  size_t size() const { return states_.size(); }

 private:
  LanguageModel::NamedFp8States states_;
  std::vector<ops::Fp8Scaling*> scalings_;  // (3·L): x, w, grad of GEMM 0, then 1, ... (states_'s)
  std::shared_ptr<comm::Communicator> group_;
  Tensor amax_;  // (3·L) f32 on the states' device: [x, w, grad] of GEMM 0, then 1, ...
};

// Keeps delayed scaling states as they were across a forward that is not training's — an
// evaluation (Trainer::evaluate), the pipeline's shape agreement (a zero micro-batch through each
// stage, runtime/train/pipeline_source.cpp): its casts record amaxes that would otherwise enter
// the next update (a run with --eval-every would scale unlike one without; a pipeline unlike one
// process). Copies of the (3 + N) buffers, written back in place (the pointers a captured step
// reads stay). Current scaling: nothing (its s is set by every cast anyway).
class Fp8StateKeeper {
 public:
  explicit Fp8StateKeeper(const LanguageModel::NamedFp8States& states);
  ~Fp8StateKeeper();
  Fp8StateKeeper(const Fp8StateKeeper&) = delete;
  Fp8StateKeeper& operator=(const Fp8StateKeeper&) = delete;

 private:
  std::vector<std::pair<Tensor, Tensor>> saved_;  // (the state, its copy)
};

// True when any state scales delayed (what the step and the checkpoint act on).
bool fp8_delayed(const LanguageModel::NamedFp8States& states);

// The checkpoint's tensors of the delayed states (the state buffers themselves, not copies).
NamedTensors fp8_checkpoint_state(const LanguageModel::NamedFp8States& states);

// Loads the states from a checkpoint's optimizer store. Returns "" when every state was there,
// else a note for the run's log (a checkpoint of a current-scaling run: the histories start
// fresh). ValueError when a state's history length differs from the run's --fp8-amax-history.
std::string load_fp8_checkpoint_state(const LanguageModel::NamedFp8States& states, const SafetensorsStore& store,
                                      const std::string& where);

}  // namespace st::runtime
