// The training step as one CUDA graph (--cuda-graph 1, docs/PERFORMANCE.md "CUDA graphs").
//
// What is captured: one whole optimizer step of the single-process trainer — clearing the
// gradients, for each of the K micro-batches the forward (dropout masks from a device seed table),
// the loss times the device loss factor (scale / K), backward and the loss added to a device sum;
// the gradient statistics (Σg², the inf/NaN flag) written to device memory; the skip decision,
// the fp16 loss-scale update, the clip coefficient and AdamW's scalars computed by one device
// kernel (ops/step_state.h); the AdamW update reading them (nothing when skipped). No value the
// host computes per step is baked in: before each step the host stages, through pinned memory and
// without waiting, the step's micro-batches into input buffers the graph reads, the lr (and
// 1 − lr·wd) into the device state, and the dropout seeds of the step into the seed table
// (runtime/nn/dropout_context.h); the optimizer's t, the scale and its good-step count live on the
// device. After the step, the state (the step's report: loss, grad norm, scale, skipped) and the
// values of the deferred host checks (tensor/graph.h: a token id out of range) are copied to
// pinned memory, also without waiting. The host reads them when the trainer asks (wait()): the
// trainer launches step n + 1 before it reads step n's line, so the host never waits inside a
// step and the device never waits for the host between steps (runtime/train/trainer.cpp).
//
// Step 1 of a run (or of a resumed run) runs the same code eagerly (a warm-up: cuBLAS handles,
// workspaces, cuDNN plans and the seed table's slots exist before the capture; the ordinary
// cache is emptied after it so that the graph's pool does not double the step's memory); step 2
// is captured and launched; every later step is a replay.
// The same bits as the eager step: the device kernels repeat the host's arithmetic operation by
// operation (ops/step_state.h), the gradient statistics and AdamW run the eager kernels, dropout
// reads the seed the eager step passes as an argument.
//
// Where it does not apply the trainer runs eagerly and says so in one line at start
// (refusal()): not --device cuda (an error: the CPU has no graphs), more than one process (dp,
// tp, pp; NCCL and the MPI staging path alike), a gradient source other than the local one, SGD,
// the overflow test hook; and a model whose step reads a device value back on the host (the
// warm-up, run under the host-read guard, throws CaptureError naming the read: the trainer then
// runs that step and the rest eagerly, with the same note). With `capture` false (the SHARDTRAIN_TEST_GRAPH_STEP_EAGER hook) every
// step runs this code eagerly, on the CPU too: CI holds that path to the eager trainer's bits.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "ops/step_state.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/nn/language_model.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/train/gradient_source.h"
#include "runtime/train/train_config.h"
#include "tensor/graph.h"
#include "tensor/pinned.h"

namespace st::runtime {

struct GraphStepReport {
  int64_t step = 0;  // the step (from 0) reported
  double loss = 0, grad_norm = 0;
  double loss_scale = 1;  // the scale the step ran with
  bool skipped = false, found_inf = false, at_floor = false;
};

class CudaGraphStep {
 public:
  // "" when the step can be a graph, else why not (a note for the run's first lines).
  static std::string refusal(const TrainConfig& cfg, bool one_process, const GradientSource* source);

  // state: the scaler and the optimizer as the run starts (fresh or resumed); table_steps: the
  // run's last step (AdamW's t never exceeds it). capture: false runs every step eagerly.
  CudaGraphStep(const TrainConfig& cfg, std::shared_ptr<LanguageModel> model, LocalGradientSource& source,
                GradientSync& sync, Optimizer& opt, const LossScaler& scaler, int64_t table_steps, bool capture);
  ~CudaGraphStep();

  // Queues step `step` (from 0) at learning rate lr (see above): warm-up and capture run on the
  // host now, a replay returns at once. At most two steps may be pending (wait for the older first).
  void launch(int64_t step, double lr);
  // The report of the oldest pending step, which must be `step`: the host waits for it. A deferred
  // check that fails for that step throws here (ValueError, the op's own message).
  GraphStepReport wait(int64_t step);
  int64_t pending() const { return static_cast<int64_t>(queue_.size()); }
  bool captured() const { return graph_.captured(); }
  // The device's scale, good-step count and optimizer t after the last waited step, written into
  // the host objects (for checkpoints and the next step's line; no device access).
  void write_back(LossScaler& scaler, Optimizer& opt) const;

 private:
  void stage(int64_t step, double lr, int slot);  // the step's inputs, lr, seeds → the device
  void body(int64_t step);                         // the step's kernels (eager or being captured)
  void collect(int slot);                          // the report and check values → host slot

  TrainConfig cfg_;
  std::shared_ptr<LanguageModel> model_;
  LocalGradientSource& source_;
  GradientSync& sync_;
  Optimizer& opt_;
  Device device_;
  bool capture_;
  ops::AdamWParams adam_{};
  Tensor state_;           // (words) i64: one ops::DeviceStepState
  Tensor loss_factor_;     // () f32: scale / K, read by the loss product
  Tensor bc1_, bc2_sqrt_;  // (table) 1 − β1^t (f64 held as i64), float(√(1 − β2^t))
  std::vector<Tensor> inputs_, targets_;  // K × (B, T) token ids, persistent across replays
  DropoutSeedTable seeds_;
  DeviceGraph graph_;
  int64_t eager_steps_ = 0;
  int64_t table_size_ = 0;
  // two slots (step parity): host staging of the inputs, and the report + check values
  std::array<std::unique_ptr<cuda::PinnedBuffer>, 2> stage_buf_, report_buf_;
  std::array<std::vector<int64_t>, 2> report_host_;  // CPU: the report copied at once
  std::array<bool, 2> checks_{false, false};          // the slot holds a replay's check values
  std::vector<int64_t> queue_;                        // pending steps, oldest first
  ops::DeviceStepState last_;                         // the state after the last waited step
  bool warned_ = false;                               // the loss scale's floor warning, once
};

}  // namespace st::runtime
