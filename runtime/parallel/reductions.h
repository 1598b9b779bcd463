// Scalar reductions the trainer needs across ranks: the inf/NaN flag (max), the squared
// gradient norm and the loss (sums). The trainer holds three (runtime/train/trainer.h,
// StepReductions):
//   loss:     over the ranks whose losses make up the global batch (with pp > 1 only the last
//             stage returns a loss; under tp only tp rank 0 adds its copy)
//   gradient: over the ranks holding DIFFERENT parts of the gradient (TP × PP; DP replicas hold
//             equal copies after the reducer, so they must not be summed again; under ZeRO the
//             DP ranks hold different shards too, so it is the world)
//   flag:     the fp16 overflow verdict, over every rank, so all skip or step together; the
//             same all-reduce carries the stop request (runtime/common/stop_request.h), so all
//             stop after the same step (allreduce_max_pair: one collective for both)
// In one process all are the identity (LocalReductions). Every rank of a group calls them in
// the same order (they are collectives).
#pragma once
#include <array>
#include <memory>

#include "comm/communicator.h"

namespace st::runtime {

class Reductions {
 public:
  virtual ~Reductions() = default;
  virtual double allreduce_sum(double x) = 0;
  virtual double allreduce_max(double x) = 0;
  // Two maxima in one collective (each element over the ranks).
  virtual std::array<double, 2> allreduce_max_pair(std::array<double, 2> x) {
    return {allreduce_max(x[0]), allreduce_max(x[1])};
  }
  // True when every value comes back unchanged (one process): the step then needs no host round
  // trip between its statistics and its decision, and can be captured (runtime/train/train_step.h).
  virtual bool identity() const { return false; }
};

class LocalReductions : public Reductions {
 public:
  double allreduce_sum(double x) override { return x; }
  double allreduce_max(double x) override { return x; }
  std::array<double, 2> allreduce_max_pair(std::array<double, 2> x) override { return x; }
  bool identity() const override { return true; }
};

// Over a communicator, f32 on the wire: the values are a handful of per-rank shares, so the f32
// rounding of their sum (2⁻²⁴ relative) is far below the 1e-5 the layouts agree to.
class CommReductions : public Reductions {
 public:
  // sum_weight scales this rank's contribution to sums (0: a copy another rank already adds).
  explicit CommReductions(std::shared_ptr<comm::Communicator> c, double sum_weight = 1.0)
      : c_(std::move(c)), sum_weight_(sum_weight) {}
  double allreduce_sum(double x) override { return reduce(sum_weight_ * x, comm::ReduceOp::sum); }
  double allreduce_max(double x) override { return reduce(x, comm::ReduceOp::max); }
  std::array<double, 2> allreduce_max_pair(std::array<double, 2> x) override;  // one all-reduce of 2 f32

 private:
  double reduce(double x, comm::ReduceOp op);
  std::shared_ptr<comm::Communicator> c_;
  double sum_weight_;
};

}  // namespace st::runtime
