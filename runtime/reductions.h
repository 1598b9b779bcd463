// Scalar reductions the trainer needs across ranks: the inf/NaN flag (max), the squared
// gradient norm and the loss (sums). The trainer uses two instances (runtime/trainer.h):
//   loss:     over the ranks whose losses make up the global batch (the DP replicas; with
//             pp > 1 only the last stage computes a loss, so it is the last stages' DP group)
//   gradient: over the ranks holding DIFFERENT parts of the gradient (TP × PP; DP replicas hold
//             equal copies after the reducer, so they must not be summed again)
// In one process both are the identity (LocalReductions). Every rank of a group calls them in
// the same order (they are collectives).
#pragma once

namespace st::runtime {

class Reductions {
 public:
  virtual ~Reductions() = default;
  virtual double allreduce_sum(double x) = 0;
  virtual double allreduce_max(double x) = 0;
};

class LocalReductions : public Reductions {
 public:
  double allreduce_sum(double x) override { return x; }
  double allreduce_max(double x) override { return x; }
};

}  // namespace st::runtime
