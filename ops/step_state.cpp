// Device step state (ops/step_state.h): the buffer, its copies, the checks, and the dispatch to
// the CPU (ops/cpu/step_state.cpp) or CUDA kernels (ops/cuda/step_state.cu, grad_stats.cu, optim.cu).
#include "ops/step_state.h"

#include <cstddef>
#include <cstring>

namespace st::ops {
namespace {

static_assert(sizeof(DeviceStepState) % sizeof(int64_t) == 0, "the state is a whole number of 8-byte elements");
constexpr int64_t kWords = sizeof(DeviceStepState) / sizeof(int64_t);

double* state_ptr(const Tensor& state) {
  ST_CHECK(state.defined() && state.dtype() == DType::i64 && state.numel() == kWords && state.is_contiguous(),
           ValueError, "device step state: expected the (" << kWords << ") i64 buffer of step_state_tensor()");
  return static_cast<double*>(state.data_ptr());
}

void check_on(const char* op, const Tensor& state, const Tensor& t) {
  ST_CHECK(t.device() == state.device(), DeviceError,
           op << ": " << t.describe() << " is not on the state's device (" << device_name(state.device()) << ")");
}

}  // namespace

Tensor step_state_tensor(const DeviceStepState& init, Device device) {
  Tensor state = Tensor::zeros({kWords}, DType::i64, device);
  step_state_upload(state, init);
  return state;
}

void step_state_upload(Tensor& state, const DeviceStepState& s) {
  state_ptr(state);
  Tensor host = Tensor::empty({kWords}, DType::i64);
  std::memcpy(host.data_ptr(), &s, sizeof s);
  state.copy_(host);
}

DeviceStepState step_state_download(const Tensor& state) {
  state_ptr(state);
  const Tensor host = state.is_cuda() ? state.to(Device::cpu) : state;
  DeviceStepState s;
  std::memcpy(&s, host.data_ptr(), sizeof s);
  return s;
}

Tensor step_state_fp8_counts(const Tensor& state) {
  state_ptr(state);
  static_assert(offsetof(DeviceStepState, fp8_overflow) % sizeof(int64_t) == 0 &&
                    offsetof(DeviceStepState, fp8_underflow) == offsetof(DeviceStepState, fp8_overflow) + sizeof(int64_t),
                "the FP8 counts are two consecutive 8-byte words");
  return state.narrow(0, static_cast<int64_t>(offsetof(DeviceStepState, fp8_overflow) / sizeof(int64_t)), 2);
}

void step_state_begin(Tensor& state, Tensor& loss_factor) {
  ST_CHECK(loss_factor.dtype() == DType::f32 && loss_factor.numel() == 1, ValueError,
           "step_state_begin: loss_factor must be a one-element f32 tensor");
  check_on("step_state_begin", state, loss_factor);
  if (state.is_cuda())
    cuda::step_state_begin(state_ptr(state), loss_factor.data<float>());
  else
    cpu::step_state_begin(state_ptr(state), loss_factor.data<float>());
}

void step_state_add_loss(Tensor& state, const Tensor& loss) {
  ST_CHECK(loss.dtype() == DType::f32 && loss.numel() == 1, ValueError,
           "step_state_add_loss: the loss must be a one-element f32 tensor, got " << loss.describe());
  check_on("step_state_add_loss", state, loss);
  if (state.is_cuda())
    cuda::step_state_add_loss(state_ptr(state), loss.data<float>());
  else
    cpu::step_state_add_loss(state_ptr(state), loss.data<float>());
}

void grad_stats_to_state(const std::vector<Tensor>& grads, const std::vector<double>& weights, Tensor& state) {
  ST_CHECK(weights.empty() || weights.size() == grads.size(), ValueError,
           "grad_stats_to_state: " << weights.size() << " weights for " << grads.size() << " gradients");
  for (const Tensor& g : grads) check_on("grad_stats_to_state", state, g);
  std::vector<double> w = weights.empty() ? std::vector<double>(grads.size(), 1.0) : weights;
  if (state.is_cuda())
    cuda::grad_stats_to_state(grads, w, state_ptr(state));
  else
    cpu::grad_stats_to_state(grads, w, state_ptr(state));
}

void step_state_decide(Tensor& state, const Tensor& bc1, const Tensor& bc2_sqrt) {
  double* st = state_ptr(state);
  ST_CHECK(bc1.dtype() == DType::i64 && bc2_sqrt.dtype() == DType::f32 && bc1.numel() == bc2_sqrt.numel(), ValueError,
           "step_state_decide: the β-power tables must be (n) i64-held f64 and (n) f32 tensors");
  check_on("step_state_decide", state, bc1);
  check_on("step_state_decide", state, bc2_sqrt);
  if (state.is_cuda())
    cuda::step_state_decide(st, static_cast<const double*>(bc1.data_ptr()), bc2_sqrt.data<float>());
  else
    cpu::step_state_decide(st, static_cast<const double*>(bc1.data_ptr()), bc2_sqrt.data<float>());
}

void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const Tensor& state) {
  ST_CHECK(decays.size() == slots.size(), ValueError,
           "adamw_step_multi_state: " << decays.size() << " decay flags for " << slots.size() << " slots");
  for (size_t k = 0; k < slots.size(); ++k) {
    ST_CHECK(slots[k].grad->is_contiguous(), ValueError,
             "adamw_step_multi_state: slot " << k << ": the gradient must be contiguous");
    check_on("adamw_step_multi_state", state, *slots[k].param);
    check_adamw_snapshot("adamw_step_multi_state", k, slots[k]);
  }
  if (state.is_cuda())
    cuda::adamw_step_multi_state(slots, decays, state_ptr(state));
  else
    cpu::adamw_step_multi_state(slots, decays, state_ptr(state));
}

}  // namespace st::ops
