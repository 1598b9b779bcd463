// Optimizers over a list of (full name, parameter): AdamW (PyTorch's, docs/design.md) and SGD with
// momentum. The update kernels are ops/optim.h; this file owns the state and the master weights.
//
// Master weights: with a low-precision compute dtype (f16/bf16) the optimizer keeps an f32
// master copy of every parameter, made from the parameter's value at construction (so build
// the model in f32, then construct the optimizer), and converts the model's tensor to the
// compute dtype in place. Each step updates the master in f32 and writes the rounded copy into
// the model's tensor in the same pass. In f32 the master IS the model's tensor.
//
// Weight decay applies only to tensors of ≥ 2 dims (matrices and embeddings; not biases or
// LayerNorm), for both optimizers. Gradients given to step() are raw (any float dtype, e.g. the
// f16/bf16 .grad() itself), one per parameter in order; the GradScale (1/loss scale, clip
// coefficient) is applied by the update kernel as it loads them (ops/optim.h). A skipped step
// (inf/NaN) simply does not call step(), so the step count (bias correction) does not advance — PyTorch GradScaler's behaviour.
//
// AdamW updates all parameters in one ops::adamw_step_multi call (on CUDA a few launches for the
// whole model instead of one per tensor; results equal the per-tensor op bit for bit). SGD calls
// ops::sgd_step per parameter.
//
// state_dict(): "step" (i64 (1)), per parameter "exp_avg.<name>", "exp_avg_sq.<name>" (AdamW) or
// "momentum_buffer.<name>" (SGD), and "master.<name>" for low-precision parameters; all f32.
// A ZeRO-1 optimizer is this over its shard of the names.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/optim.h"
#include "runtime/common/enum_names.h"
#include "runtime/common/named_tensors.h"
#include "tensor/tensor.h"

namespace st::runtime {

enum class OptimizerKind { adamw, sgd };
template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::array<EnumName<OptimizerKind>, 2> table{
      {{OptimizerKind::adamw, "adamw"}, {OptimizerKind::sgd, "sgd"}}};
};

class Optimizer {
 public:
  Optimizer(NamedTensors params, DType compute);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update at learning rate `lr`; grads[i] (shaped like params()[i]) times `gs` is final.
  void step(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs = {});
  // The update of a training step (runtime/train/train_step.h): the skip decision, lr, the
  // GradScale and t come from the step state (ops/step_state.h). An optimizer with
  // device_scalars() reads them on the device (nothing waits: the step can be a CUDA graph; the
  // host's count then follows the state through set_steps_taken); the others read the state back
  // on the host first and run update() with its values (the same bits: lr is float(lr) either way).
  void step_on_device(const std::vector<Tensor>& grads, const Tensor& state);
  virtual bool device_scalars() const { return false; }
  void set_steps_taken(int64_t t) { step_ = t; }

  const NamedTensors& params() const { return params_; }
  size_t size() const { return params_.size(); }
  int64_t steps_taken() const { return step_; }
  DType compute() const { return compute_; }
  const Tensor& master(size_t i) const { return master_[i]; }  // f32
  bool decays(size_t i) const { return params_[i].second.dim() >= 2; }
  // (name → f32 master), the full-precision weights to checkpoint.
  NamedTensors master_weights() const;

  NamedTensors state_dict() const;
  // Strict: every key of state_dict() must be present with its shape, no other key; ValueError
  // naming the key. Low-precision model tensors are refreshed from the loaded masters.
  void load_state_dict(const std::map<std::string, Tensor>& sd);
  // The same, one tensor at a time: fill(key, dst) writes the value of every key of state_dict()
  // into dst (its live tensor; "step" an i64 (1)), so a checkpoint's parts are read straight into
  // place (runtime/parallel/state_io.h).
  void load_state(const std::function<void(const std::string& key, const Tensor& dst)>& fill);

  // Asynchronous saves (runtime/train/trainer_checkpoint.cpp): keep_snapshot() gives the optimizer
  // a block on its state's device into which every update_on_device whose step state says so
  // (ops::DeviceStepState::snapshot) also writes the master weights and state it leaves — inside
  // the update, at the cost of its stores alone — so that a save downloads them from there while
  // the next step overwrites the state, instead of first copying them (reading them once more).
  // False where the optimizer has no such update (SGD); a second call keeps the block.
  virtual bool keep_snapshot() { return false; }
  // The copy in that block of `t` (a master weight or a state tensor of this optimizer: the same
  // bytes, as master_weights() and state_dict() give them), shaped like t; undefined for any other
  // tensor or without a block. Valid after an update that wrote the block, until the next one.
  Tensor snapshot_copy(const Tensor& t) const;
  const Tensor& snapshot_block() const { return snapshot_; }  // undefined without keep_snapshot()

 protected:
  // All parameters at once; grads checked (one per parameter, shaped like it), step_ advanced.
  virtual void update(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) = 0;
  virtual void update_on_device(const std::vector<Tensor>& grads, const Tensor& state);  // default: host read, update()
  // Per-parameter state tensors of this optimizer: (key prefix, tensors aligned with params).
  virtual std::vector<std::pair<std::string, std::vector<Tensor>*>> state_slots() = 0;
  Tensor lp_target(size_t i) const;  // the model tensor to receive the rounded update, or undefined
  NamedTensors params_;
  std::vector<Tensor> master_;
  DType compute_;
  int64_t step_ = 0;
  Tensor snapshot_;                                  // keep_snapshot()'s block (1-D f32)
  // a tensor the block copies (by its data pointer; none of 0 elements) → (it, its copy there)
  std::unordered_map<const void*, std::pair<Tensor, Tensor>> copies_;
};

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedTensors params, const AdamWOptions& opt, DType compute = DType::f32);
  bool device_scalars() const override { return true; }
  const AdamWOptions& options() const { return opt_; }

 protected:
  void update(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) override;
  void update_on_device(const std::vector<Tensor>& grads, const Tensor& state) override;
  std::vector<std::pair<std::string, std::vector<Tensor>*>> state_slots() override;

 public:
  // param i's part of the block: [master | m | v] (ops::AdamWSlot::snapshot), at a 256-byte boundary
  bool keep_snapshot() override;

 private:
  AdamWOptions opt_;
  std::vector<Tensor> m_, v_;          // f32, shaped like the params
  std::vector<Tensor> slot_snapshot_;  // keep_snapshot(): param i's part of the block, else empty
};

struct SgdOptions {
  double lr = 1e-2, momentum = 0.9, weight_decay = 0.0;
};

class Sgd : public Optimizer {
 public:
  Sgd(NamedTensors params, const SgdOptions& opt, DType compute = DType::f32);

 protected:
  void update(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) override;
  std::vector<std::pair<std::string, std::vector<Tensor>*>> state_slots() override;

 private:
  SgdOptions opt_;
  std::vector<Tensor> buf_;  // f32 momentum buffers
};

}  // namespace st::runtime
