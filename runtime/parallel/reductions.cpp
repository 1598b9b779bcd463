#include "runtime/parallel/reductions.h"

#include <vector>

namespace st::runtime {

double CommReductions::reduce(double x, comm::ReduceOp op) {
  if (!c_ || c_->size() == 1) return x;
  Tensor t = Tensor::from_vector(std::vector<double>{x}, {1});  // (1,) f32
  c_->all_reduce(t, op)->wait();
  return t.item();
}

std::array<double, 2> CommReductions::allreduce_max_pair(std::array<double, 2> x) {
  if (!c_ || c_->size() == 1) return x;
  Tensor t = Tensor::from_vector(std::vector<double>{x[0], x[1]}, {2});  // (2,) f32: small integers, exact
  c_->all_reduce(t, comm::ReduceOp::max)->wait();
  const std::vector<double> h = t.to_double();
  return {h[0], h[1]};
}

}  // namespace st::runtime
