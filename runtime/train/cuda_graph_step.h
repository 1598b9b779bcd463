// The training step as one CUDA graph (--cuda-graph 1, docs/PERFORMANCE.md "CUDA graphs").
//
// What is captured: one whole optimizer step of the single-process trainer — clearing the
// gradients, for each of the K micro-batches the forward, the loss times the device loss factor
// (scale / K), backward and the loss added to a device sum; the gradient statistics (Σg², the
// inf/NaN flag) written to device memory; the skip decision, the fp16 loss-scale update, the clip
// coefficient and AdamW's scalars computed by one device kernel (ops/step_state.h); the AdamW
// update reading them (nothing when skipped). No value the host computes per step is baked in:
// the lr (and 1 − lr·wd) is written into the device state before every replay, the micro-batches
// are copied into input buffers that persist across replays, and the optimizer's t, the scale
// and its good-step count live on the device.
// Step 1 of a run (or of a resumed run) runs the same code eagerly (a warm-up: cuBLAS handles,
// workspaces, lazily built tables exist before the capture); step 2 is captured and launched; every
// later step is a replay. The report of a step (loss, grad norm, scale, skipped) is read back
// after its replay, outside the graph.
// The same bits as the eager step: the device kernels repeat the host's arithmetic operation by
// operation (ops/step_state.h), the gradient statistics and AdamW run the eager kernels.
//
// Where it does not apply the trainer runs eagerly and says so in one line at start
// (refusal()): not --device cuda (an error: the CPU has no graphs), more than one process (dp,
// tp, pp; NCCL and the MPI staging path alike), a gradient source other than the local one, SGD,
// dropout > 0 (its masks are keyed by the step on the host), the overflow test hook.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/step_state.h"
#include "runtime/nn/language_model.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/train/gradient_source.h"
#include "runtime/train/train_config.h"
#include "tensor/graph.h"

namespace st::runtime {

struct GraphStepReport {
  double loss = 0, grad_norm = 0, loss_scale = 1;
  bool skipped = false, found_inf = false, at_floor = false;
};

class CudaGraphStep {
 public:
  // "" when the step can be a graph, else why not (a note for the run's first lines).
  static std::string refusal(const TrainConfig& cfg, const LanguageModel& model, bool one_process,
                             const GradientSource* source);

  // state: the scaler and the optimizer as the run starts (fresh or resumed); table_steps: the
  // run's last step (AdamW's t never exceeds it).
  CudaGraphStep(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, LocalGradientSource& source,
                GradientSync& sync, Optimizer& opt, const LossScaler& scaler, int64_t table_steps);

  // Step `step` (from 0) at learning rate lr: eager warm-up, capture, or replay (see above);
  // returns its report (the host waits for the step's end, outside the graph).
  GraphStepReport run(int64_t step, double lr);
  // The device's scale, good-step count and optimizer t after the last step, written into the
  // host objects (for checkpoints and the next step's line; no device access).
  void write_back(LossScaler& scaler, Optimizer& opt) const;

 private:
  void body(int64_t step);  // the step's kernels on the current stream (eager or being captured)

  TrainConfig cfg_;
  std::shared_ptr<LanguageModel> model_;
  LocalGradientSource& source_;
  GradientSync& sync_;
  Optimizer& opt_;
  ops::AdamWParams adam_{};
  Tensor state_;           // (words) i64: one ops::DeviceStepState
  Tensor loss_factor_;     // () f32: scale / K, read by the loss product
  Tensor bc1_, bc2_sqrt_;  // (table) 1 − β1^t (f64 held as i64), float(√(1 − β2^t))
  std::vector<Tensor> inputs_, targets_;  // K × (B, T) token ids, persistent across replays
  std::vector<bool> decays_;
  DeviceGraph graph_;
  int64_t eager_steps_ = 0;
  int64_t table_size_ = 0;
  ops::DeviceStepState last_;  // the state after the last step, read back
  bool warned_ = false;        // the loss scale's floor warning, once
};

}  // namespace st::runtime
