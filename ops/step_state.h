// The scalars of one training step kept in device memory (runtime/train/train_step.h: every
// step of every layout runs on them), so that a step can be captured once as a CUDA graph and
// replayed: no value the host computes per step may be baked into the graph, and the host may not
// wait for one inside the step. The state is one DeviceStepState in a device buffer
// (state_tensor()), written by the host only between steps (lr, decay; with several ranks the
// reduced loss, Σg² and flag between grad_stats_to_state and step_state_decide) and by the step's
// own kernels otherwise; the host reads the report after the step (a graph: a step late).
//
// Every value is computed by the same IEEE operations, in the same order and precision, as the
// host's own arithmetic (runtime/optim/*, ops/optim.h adamw_scalars): the double divisions,
// square root and products below are correctly rounded on the device as on the host, the powers
// β^t come from tables the host filled with std::pow, so a graph run and an eager run give the
// same bits.
//
// A step in kernels, in order:
//   step_state_begin      loss_factor ← float(scale / divisor), inv_scale ← float(1 / scale)
//                         (1 without loss scaling), loss_sum ← 0, the FP8 counts ← 0
//   (--precision fp8)     every FP8 cast of the step adds its overflow / underflow counts into
//                         fp8_overflow / fp8_underflow (step_state_fp8_counts(): the model's
//                         Fp8LinearState counts point there; ops/fp8_quantize.h)
//   step_state_add_loss   loss_sum += double(loss)   (per micro-batch, in order)
//   grad_stats_to_state   sumsq, found_inf of the raw gradients times inv_scale (ops/optim.h's
//                         grad_stats, the same kernels and order; no host read)
//   step_state_decide     loss = loss_sum / divisor; skip = found_inf or loss not finite; the
//                         loss scaler's update (LossScaler::update); else the clip coefficient
//                         of √sumsq, opt_step + 1 and this step's AdamW scalars; the report
//   adamw_step_multi_state  adamw_step_multi with those scalars, nothing when skip; when the
//                         host set `snapshot`, the slots' snapshot blocks receive what the step
//                         left (the unchanged state when it skips)
// The state lives on the model's device: CUDA (what a graph needs) or the CPU, where the same
// functions run as plain host code (tests/runtime/train/test_step_golden.cpp holds them to the
// bits the host-scalar trainer gave; test_graph_step_cpu.cpp the graph mode to the eager one).
#pragma once
#include <cstdint>
#include <vector>

#include "ops/optim.h"
#include "tensor/tensor.h"

namespace st::ops {

struct DeviceStepState {
  // carried from step to step
  double loss_scale = 1.0;  // the fp16 dynamic scale (1 when disabled)
  int64_t good_steps = 0;   // clean steps since the scale last changed
  int64_t opt_step = 0;     // optimizer steps taken (AdamW's t before this step)
  // constants of the run (set once by the host)
  double divisor = 1.0;        // K · dp: the loss factor's denominator and the mean over micro-batches
  double clip = 0.0;           // --clip (≤ 0: none)
  double min_scale = 1.0;      // the scaler's floor
  int64_t growth_interval = 2000;
  int64_t scaler_enabled = 0;
  int64_t table_size = 0;      // entries of the β-power tables (t = 0 … table_size − 1)
  float lerp_w = 0, beta2 = 0, one_minus_b2 = 0, eps = 0;  // AdamWScalars' step-independent fields
  // set by the host before each step (from the schedule)
  double lr = 0;    // decimal_widen(float(lr)), as adamw_scalars takes it
  float decay = 1;  // 1 − lr·wd of the decaying tensors (adamw_scalars)
  int32_t snapshot = 0;  // 1: the optimizer also writes what it leaves into its slots' snapshot blocks
  // written by the step's kernels
  double loss_sum = 0;
  double sumsq = 0;
  int64_t fp8_overflow = 0, fp8_underflow = 0;  // this rank's, over the step's FP8 casts (+= by the cast kernels)
  int32_t found_inf = 0;
  int32_t skip = 0;
  float loss_factor = 1, inv_scale = 1;
  GradScaleF32 gs;
  AdamWScalars with_wd{}, no_wd{};
  // the step's report (what the step line shows)
  double rep_loss = 0, rep_norm = 0, rep_scale = 1;
  int32_t rep_skipped = 0, rep_found_inf = 0, rep_at_floor = 0, pad1 = 0;
};

// A buffer on `device` holding one DeviceStepState (i64 elements), and its upload / download
// (CUDA: both on the current stream; download waits for it).
Tensor step_state_tensor(const DeviceStepState& init, Device device = Device::cuda);
void step_state_upload(Tensor& state, const DeviceStepState& s);
DeviceStepState step_state_download(const Tensor& state);
// The state's two FP8 count words [fp8_overflow, fp8_underflow] as a (2) i64 view of `state`:
// what the casts of a step add into (ops/fp8_linear.h's Fp8LinearState::counts).
Tensor step_state_fp8_counts(const Tensor& state);

// loss_factor: a () f32 device tensor receiving float(scale / divisor) (the loss multiplier).
void step_state_begin(Tensor& state, Tensor& loss_factor);
void step_state_add_loss(Tensor& state, const Tensor& loss);  // loss () f32
void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, Tensor& state);
// bc1 (table_size) f64: 1 − β1^t; bc2_sqrt (table_size) f32: float(√(1 − β2^t)) (adamw_scalars' forms)
void step_state_decide(Tensor& state, const Tensor& bc1, const Tensor& bc2_sqrt);
// adamw_step_multi with slot k's scalars taken from the state (with_wd when decays[k], else no_wd);
// the slots' own `s` is ignored. Their snapshot blocks are written only when state.snapshot is set,
// then also when the step skips (the state as it was).
void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const Tensor& state);

namespace cpu {
void step_state_begin(double* state, float* loss_factor);
void step_state_add_loss(double* state, const float* loss);
void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, double* state);
void step_state_decide(double* state, const double* bc1, const float* bc2_sqrt);
void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const double* state);
}  // namespace cpu
namespace cuda {
void step_state_begin(double* state, float* loss_factor);
void step_state_add_loss(double* state, const float* loss);
void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, double* state);
void step_state_decide(double* state, const double* bc1, const float* bc2_sqrt);
void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const double* state);
}  // namespace cuda

}  // namespace st::ops
