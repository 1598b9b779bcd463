// TrainStep: one optimizer step of any layout, written once. The same body runs eagerly (every
// layout) and, for one process on CUDA, is captured once as a CUDA graph and replayed
// (--cuda-graph 1, docs/PERFORMANCE.md "CUDA graphs"): the graph is a capture of this body, not a
// second copy of it.
//
// The body, in docs/design.md's order, on every rank:
//   1. GradientSync::begin_step                       clear or zero the gradients
//   2. step_state_begin                               loss factor ← float(scale / (K·dp)) on the device
//   3. GradientSource::compute_gradients              forward/backward over this rank's micro-batches
//                                                     (loss × the factor), each mean loss added to the state
//   4. GradientSync::finish                           DP / ZeRO reductions complete, tied weights summed
//   5. grad_stats_to_state                            one pass over the raw gradients: Σg² (norm weights:
//                                                     a copy another rank counts weighs 0) and inf/NaN
//   6. combine (several ranks only)                   the loss, Σg² and the flag summed / maxed over the
//                                                     layout's groups (StepReductions): a host round trip;
//                                                     the flag's all-reduce also maxes the stop request
//                                                     (runtime/common/stop_request.h), so every rank
//                                                     learns a signal any rank got after the same step
//   7. step_state_decide                              skip (inf/NaN, agreed), the fp16 scale's update, the
//                                                     clip coefficient of the global norm, AdamW's scalars
//   8. Optimizer::step_on_device                      the update with those scalars; nothing when skipped
//   9. GradientSync::end_step                         ZeRO-1/2 broadcast the owners' updated values
//  10. Fp8DelayedScaling::update (--fp8-scaling      every FP8 GEMM's amaxes max-reduced over the stage's
//      delayed only)                                 dp × tp ranks (several ranks: one all-reduce), then
//                                                    each history rolled and the next scales set (device
//                                                    kernels: captured with the rest for one process)
// Every scalar of the step lives in the step state (ops/step_state.h), computed by the same IEEE
// operations the host would use, so no host value changes per step and nothing in 1-5 and 7-9
// waits for the host: one process can be a graph. The host writes lr (and 1 − lr·wd) into the state
// before each step and reads the step's report (loss, grad norm, scale, skipped) after it.
//
// Modes (decided once by the trainer, from the config and what the wiring supports:
// capture_refusal()):
//   eager      the body runs on the host's call; the report is read at once. The micro-batches are
//              read by the source, dropout seeds are arguments.
//   graph      CUDA, one process: step 1 (of a run or a resumed run) runs the body eagerly as a
//              warm-up under the host-read guard (cuBLAS handles, workspaces, cuDNN plans and the
//              seed table's slots exist before the capture; a read back there is a CaptureError and
//              the step falls back to eager, see launch()); step 2 is captured and launched; every
//              later step is a replay. Before each launch the host stages, through pinned memory
//              and without waiting, the step's micro-batches into device buffers the body reads
//              (StepContext::staged), lr into the state and the dropout seeds into the seed table
//              (runtime/nn/dropout_context.h); after it the state and the deferred host checks
//              (tensor/graph.h) are copied back without waiting, and the trainer reads a step's
//              report after it launched the next one.
//   rehearsal  the graph mode without the capture (staged inputs, the seed table, late reports),
//              on any device: what CI holds to the eager mode's bits on the CPU
//              (tests/runtime/train/test_graph_step_cpu.cpp), and the GPU test to the replay's.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/step_state.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/nn/language_model.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/parallel/reductions.h"
#include "runtime/train/fp8_delayed.h"
#include "runtime/train/gradient_source.h"
#include "tensor/graph.h"
#include "tensor/pinned.h"

namespace st::runtime {

// What a layout plugs into the step's scalar reductions (runtime/train/parallel_training.cpp
// builds them); null members: one process (the identity).
struct StepReductions {
  std::shared_ptr<Reductions> loss;  // this rank's loss share → the global mean; null: identity
  std::shared_ptr<Reductions> grad;  // this rank's Σg² → the global Σg²; null: identity
  std::shared_ptr<Reductions> flag;  // the inf/NaN verdict, agreed by every rank; null: grad
};

// Test seams of a run (set by tests, and by launch/ from the documented test variables of
// docs/testing.md; never read from the environment here). None is set in a real run.
struct TrainSeams {
  // Called with (step from 1, this rank of the world, its raw gradients) before their statistics: a
  // test makes one infinite to check that every rank skips together (infinite_gradient below).
  std::function<void(int64_t step, int rank, std::vector<Tensor>& grads)> after_gradients;
  // The graph mode's code (staged inputs, the seed table, late reports) without the capture, on
  // any device: what CI holds to the eager step's bits (--cuda-graph 1 still decides).
  bool rehearse_graph = false;
  // Every rank throws right before a checkpoint's rename, its files written (a crash mid-save;
  // SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT).
  bool crash_before_commit = false;
  // Called with (the checkpoint's step, this rank of the world) on the asynchronous checkpoint
  // writer's thread (--async-checkpoint 1) between its model and optimizer files: a throw is the
  // writer failing mid-save (SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL=RANK), a wait holds the write
  // while training goes on (tests/runtime/train/test_async_checkpoint.cpp).
  std::function<void(int64_t step, int rank)> checkpoint_writer;
  // The DP / ZeRO reducer skips its collectives and does everything else (the peer of
  // tests/bench/bench_dp_overlap; SHARDTRAIN_TEST_SKIP_GRAD_COMM).
  bool skip_grad_comm = false;
};

// The overflow seam of docs/testing.md (SHARDTRAIN_TEST_INF_STEP / _RANK, read by launch/): rank
// `rank`'s (−1: every rank's) first gradient element becomes +inf at step `from` (from 1), or at
// every step from it on when `onward`.
std::function<void(int64_t, int, std::vector<Tensor>&)> infinite_gradient(int64_t from, bool onward, int rank);

// What the step runs, from the trainer's wiring.
struct StepParts {
  std::shared_ptr<LanguageModel> model;
  GradientSource* source = nullptr;
  GradientSync* sync = nullptr;
  Optimizer* opt = nullptr;
  StepReductions reductions;          // members set (the trainer fills the identities)
  std::vector<double> norm_weights;   // per optimizer parameter (empty: 1 each)
  TrainSeams seams;
  int rank = 0;                       // this rank of the world (for the seams)
  // --fp8-scaling delayed: the ranks the FP8 amaxes are max-reduced over (runtime/train/fp8_delayed.h); null: none
  std::shared_ptr<comm::Communicator> fp8_amax_group;
};

// The run's constants the state needs.
struct StepConstants {
  ops::AdamWParams adam{};  // lr is the run's base (the schedule's lr is staged per step)
  double clip = 0;          // ≤ 0: none
  // K · dp · cp: the step's loss is the mean of its micro-batches' means over the replicas and
  // the cp ranks (each holds T/cp tokens of every sequence of its replica's micro-batch)
  double divisor = 1;
  int64_t cp = 1;  // context-parallel ranks (the divisor's last factor)
};

enum class StepMode { eager, graph, rehearsal };

struct StepReport {
  int64_t step = 0;  // the step (from 0) reported
  double loss = 0, grad_norm = 0;
  double loss_scale = 1;  // the scale the step ran with
  bool skipped = false, found_inf = false, at_floor = false;
  // this rank's FP8 casts' overflow / underflow counts over the step (0 without FP8 GEMMs): every
  // micro-batch, forward and backward, a recompute's casts again (ops/fp8_quantize.h)
  int64_t fp8_overflow = 0, fp8_underflow = 0;
  // a stop was requested (the signal; 0 none): several ranks, the largest over every rank as the
  // step's combine saw them (the same on every rank); one process, the request as wait() sees it
  int stop_signal = 0;
};

class TrainStep {
 public:
  // "" when a step of these parts can be captured as a CUDA graph, else why not (for the run's note).
  static std::string capture_refusal(const StepParts& parts);

  // scaler, the optimizer's step count: as the run starts (fresh or resumed); table_steps: the
  // run's last step (AdamW's t in a captured step never exceeds it; eager steps grow the tables).
  TrainStep(StepParts parts, const StepConstants& constants, const LossScaler& scaler, int64_t table_steps,
            StepMode mode);
  ~TrainStep();

  // Runs (eager) or queues (graph, rehearsal) step `step` (from 0) at learning rate lr. At most two
  // steps may be pending (wait for the older first). snapshot: the optimizer also writes what it
  // leaves into its snapshot block (Optimizer::keep_snapshot; nothing without one).
  void launch(int64_t step, double lr, bool snapshot = false);
  // The report of the oldest pending step, which must be `step`: the host waits for it. A deferred
  // check that failed for that step throws here (ValueError, the op's own message).
  StepReport wait(int64_t step);
  // The state's scale, good-step count and optimizer t after the last waited step, written into the
  // host objects (for checkpoints and the next step's line; no device access).
  void write_back(LossScaler& scaler, Optimizer& opt) const;

  StepMode mode() const { return mode_; }
  bool defers_reports() const { return mode_ != StepMode::eager; }  // the trainer reads a step late
  bool captured() const { return graph_.captured(); }
  int64_t pending() const { return static_cast<int64_t>(queue_.size()); }
  // Why a graph step fell back to eager at its warm-up (a read back); "" when it did not.
  const std::string& fallback() const { return fallback_; }

 private:
  void grow_tables(int64_t steps);                 // AdamW's β-power tables up to t = steps + 1
  void stage(int64_t step, double lr, bool snapshot, int slot);  // lr, snapshot (, staged inputs, seeds) → the device
  void body(int64_t step);                         // the step's kernels (eager or being captured)
  void combine(int slot);                          // step 6: the layout's reductions of the state
  void collect(int slot);                          // the report and check values → host slot
  StepContext context(int64_t step);

  StepParts p_;
  StepConstants c_;
  StepMode mode_;
  Device device_;
  Tensor state_;           // (words) i64: one ops::DeviceStepState
  Tensor loss_factor_;     // () f32: scale / (K·dp), read by the loss products
  Tensor bc1_, bc2_sqrt_;  // (table) 1 − β1^t (f64 held as i64), float(√(1 − β2^t))
  int64_t table_size_ = 0;
  std::vector<TokenBatch> staged_;  // graph, rehearsal: K × (B, T) token ids, persistent across replays
  std::unique_ptr<DropoutSeedTable> seeds_;  // graph, rehearsal
  DeviceGraph graph_;
  int64_t eager_steps_ = 0;
  // two slots (step parity): host staging of the inputs, and the report + check values
  std::array<std::unique_ptr<cuda::PinnedBuffer>, 2> stage_buf_, report_buf_;
  std::array<std::vector<int64_t>, 2> report_host_;  // CPU: the report copied at once
  std::array<bool, 2> checks_{false, false};          // the slot holds a replay's check values
  std::array<int, 2> stop_{0, 0};                     // the stop request combine() agreed on (several ranks)
  std::vector<int64_t> queue_;                        // pending steps, oldest first
  ops::DeviceStepState last_;                         // the state after the last waited step
  std::unique_ptr<Fp8DelayedScaling> fp8_delayed_;    // --fp8-scaling delayed; null otherwise
  std::string fallback_;
  bool warned_ = false;                               // the loss scale's floor warning, once
};

}  // namespace st::runtime
