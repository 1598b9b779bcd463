// ParameterSharding: how a rank holds the model's parameters, which the trainer calls without
// knowing the ZeRO stage (runtime/train/trainer.cpp):
//   start                   the tensors this rank's optimizer steps, filled from where the run's
//                           weights come from (a checkpoint, --init-from, the seed)
//   adopt                   the compute dtype, once the optimizer made its f32 masters
//   load_optimizer_state    a resumed run's optimizer state, this rank's part of each key
//   full_weights /          what a checkpoint writes: the tensors as whole as this rank writes
//   full_optimizer_state    them (runtime/parallel/state_sharding.h)
//   parameters_resident     whether the model's tensors stay in memory between the layers' uses
//
// Two implementations:
//   WholeParameters   ZeRO 0-2: every parameter of this rank's stage (and tp shard) whole; ZeRO-1/2
//                     shard only the optimizer state and gradients, through the gradient sync and
//                     the roles the wiring gives the trainer (runtime/parallel/zero1.h)
//   Zero3Parameters   ZeRO-3: 1/dp of every parameter, gathered around each layer's use
//                     (runtime/parallel/zero3.h); the optimizer steps the pieces
// zero_stage_in_effect() is the one answer to "which ZeRO stage does this layout run": the
// wiring, the memory check and the planner all ask it.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "runtime/common/named_tensors.h"
#include "runtime/nn/language_model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/state_io.h"
#include "runtime/parallel/zero3.h"

namespace st::runtime {

// --zero `requested` over `dp` replicas: ZeRO shards over the data-parallel group, so with one
// replica there is nothing to shard and the stage is 0.
int zero_stage_in_effect(int64_t requested, int64_t dp);

// Where a run's weights come from at start.
struct ParameterSource {
  std::string where;  // for error lines: "--resume: DIR (model weights)", "--init-from DIR"; "": the seed
  // Fills the model's own (whole) parameters; null: they are filled already (the model was built
  // from the seed or --init-from).
  std::function<void(LanguageModel& model)> whole;
  // Elements [first, first + piece.numel()) of this rank's local tensor of `name` (shaped `local`,
  // flattened) into `piece`: a window of a checkpoint, of a pretrained directory, or of the seed's
  // keyed init.
  std::function<void(const std::string& name, const Shape& local, Tensor& piece, int64_t first)> window;
};

class ParameterSharding {
 public:
  virtual ~ParameterSharding() = default;
  // `mine`: the model's parameters this rank's optimizer updates (ZeRO-1/2: its owned ones).
  virtual NamedTensors start(LanguageModel& model, NamedTensors mine, const ParameterSource& src, Device device) = 0;
  virtual void adopt(DType) {}
  // Every key of opt.state_dict() read from `state` (a checkpoint's optimizer store), this rank's part.
  virtual void load_optimizer_state(Optimizer& opt, const PartSource& state) = 0;
  virtual NamedTensors full_weights(const NamedTensors& weights) { return weights; }
  virtual NamedTensors full_optimizer_state(const NamedTensors& state) { return state; }
  // false: a layer's parameters exist only around its forward and backward (a head reading a
  // weight outside its layer — the chunked LM head — cannot run)
  virtual bool parameters_resident() const = 0;
};

class WholeParameters : public ParameterSharding {
 public:
  NamedTensors start(LanguageModel& model, NamedTensors mine, const ParameterSource& src, Device device) override;
  void load_optimizer_state(Optimizer& opt, const PartSource& state) override;
  bool parameters_resident() const override { return true; }
};

class Zero3Parameters : public ParameterSharding {
 public:
  explicit Zero3Parameters(std::shared_ptr<Zero3> zero) : zero_(std::move(zero)) {}
  NamedTensors start(LanguageModel& model, NamedTensors mine, const ParameterSource& src, Device device) override;
  void adopt(DType compute) override { zero_->adopt(compute); }
  void load_optimizer_state(Optimizer& opt, const PartSource& state) override;
  NamedTensors full_weights(const NamedTensors& weights) override { return zero_->gather_full(weights); }
  NamedTensors full_optimizer_state(const NamedTensors& state) override;
  bool parameters_resident() const override { return false; }
  Zero3& zero() { return *zero_; }

 private:
  std::shared_ptr<Zero3> zero_;
};

}  // namespace st::runtime
