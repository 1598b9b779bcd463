// GradientSync: what a step does to the gradients around the gradient source's forward and
// backward passes — the part of a step that data parallelism, ZeRO and tied weights replace.
// The trainer calls, in this order, on every rank:
//   begin_step()       before the step's first micro-batch: clear or zero the gradients
//   last_backward()    (called by the gradient source) just before the step's final backward,
//                      so communication can start from the grad-ready hooks during it
//   finish()           after the last backward: every gradient this rank's optimizer reads is
//                      complete (waits for the communication still in flight)
//   end_step(outcome)  after the optimizer ran or the step was skipped (inf/NaN); outcome.stepped()
//                      says which (reading it waits for the device: only layouts that need it ask)
// capturable() is true for a sync that issues no collective and reads nothing back, so the step
// that calls it can be captured as a CUDA graph (runtime/train/train_step.h): one process only.
// Implementations: ClearGrads (one process), DataParallelSync (GradReducer), ZeroSync (Zero1),
// Zero3Sync (Zero3),
// TiedGradSync (a weight held by two pipeline stages); SyncChain runs several in order.
// Every rank of a group calls these in the same order (they issue collectives).
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "runtime/nn/module.h"
#include "runtime/parallel/grad_reducer.h"
#include "runtime/parallel/zero1.h"
#include "runtime/parallel/zero3.h"

namespace st::runtime {

// Whether the step's optimizer ran: known on the device, read on the host only when asked.
class StepOutcome {
 public:
  virtual ~StepOutcome() = default;
  virtual bool stepped() const = 0;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void begin_step() = 0;
  virtual void last_backward() {}
  virtual void finish() {}
  virtual void end_step(const StepOutcome&) {}
  virtual bool capturable() const { return false; }
};

// One process: gradients are dropped before and after each step (nothing holds them between
// steps, so their memory is free while the optimizer is not running).
class ClearGrads : public GradientSync {
 public:
  explicit ClearGrads(std::shared_ptr<Module> model) : model_(std::move(model)) {}
  void begin_step() override { model_->zero_grad(/*set_to_none=*/true); }
  void end_step(const StepOutcome&) override { model_->zero_grad(/*set_to_none=*/true); }
  bool capturable() const override { return true; }

 private:
  std::shared_ptr<Module> model_;
};

// Bucketed all-reduce from the grad-ready hooks of the last micro-batch (runtime/parallel/grad_reducer.h).
class DataParallelSync : public GradientSync {
 public:
  explicit DataParallelSync(std::shared_ptr<GradReducer> reducer) : reducer_(std::move(reducer)) {}
  void begin_step() override;
  void last_backward() override { reducer_->set_sync(true); }
  void finish() override { reducer_->finalize(); }
  const GradReducer& reducer() const { return *reducer_; }

 private:
  std::shared_ptr<GradReducer> reducer_;
};

// ZeRO-1: the gradients reduced to their owners bucket by bucket during the last backward, the
// owners' updated values broadcast back after a step that was taken (runtime/parallel/zero1.h).
// Weights tied across stages: their TiedGradSync goes before this in the SyncChain.
class ZeroSync : public GradientSync {
 public:
  explicit ZeroSync(std::shared_ptr<Zero1> zero) : zero_(std::move(zero)) {}
  void begin_step() override { zero_->zero_grad(); }
  void last_backward() override { zero_->set_sync(true); }
  void finish() override { zero_->reduce_gradients(); }
  void end_step(const StepOutcome& o) override {
    if (o.stepped()) zero_->broadcast_updates();
  }
  const Zero1& zero() const { return *zero_; }

 private:
  std::shared_ptr<Zero1> zero_;
};

// ZeRO-3: the gradient shards zeroed before the step; the units reduce-scattered from the hooks
// during every backward, the last ones completed in finish(); then the shards of weights tied
// across stages (units of their own, cut alike on both stages) summed over `tied` (the pair of
// ranks of one dp and tp position). Nothing after the step: the next forward gathers.
class Zero3Sync : public GradientSync {
 public:
  Zero3Sync(std::shared_ptr<Zero3> zero, std::vector<std::string> tied = {}, std::shared_ptr<comm::Communicator> group = nullptr)
      : zero_(std::move(zero)), tied_(std::move(tied)), group_(std::move(group)) {}
  void begin_step() override { zero_->begin_step(); }
  void finish() override;
  const Zero3& zero() const { return *zero_; }

 private:
  std::shared_ptr<Zero3> zero_;
  std::vector<std::string> tied_;
  std::shared_ptr<comm::Communicator> group_;
};

// A weight held by two pipeline stages (the GPT's wte in the first and the last): the two
// copies' gradients are summed over a two-rank group after backward. Under plain DP after the
// all-reduce (every rank then holds its stage's group sum, and the pair adds its two stages');
// under ZeRO before the reduce to the owner, which leaves the sum on one rank only: the tied
// weights' buckets wait for finalize() (ReducerOptions::launch_in_finalize), and this part's
// finish() runs first. Both orders give Σ over stages and DP ranks.
class TiedGradSync : public GradientSync {
 public:
  // params: this rank's copies of the tied weights, in the same order on both ranks of `group`.
  TiedGradSync(std::vector<Tensor> params, std::shared_ptr<comm::Communicator> group)
      : params_(std::move(params)), group_(std::move(group)) {}
  void begin_step() override {}
  void finish() override;
  const std::shared_ptr<comm::Communicator>& group() const { return group_; }

 private:
  std::vector<Tensor> params_;
  std::shared_ptr<comm::Communicator> group_;
};

// Runs its parts in order at every call.
class SyncChain : public GradientSync {
 public:
  explicit SyncChain(std::vector<std::shared_ptr<GradientSync>> parts) : parts_(std::move(parts)) {}
  void begin_step() override;
  void last_backward() override;
  void finish() override;
  void end_step(const StepOutcome& o) override;

 private:
  std::vector<std::shared_ptr<GradientSync>> parts_;
};

}  // namespace st::runtime
