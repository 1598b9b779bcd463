// mean (ops/mean.h): sum, then scale.
#include "ops/mean.h"

#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace st::ops {
namespace {

Tensor scaled(const Tensor& total, int64_t in_numel) {
  // the reduced count: the input's elements over the result's (both shapes keep the other dims)
  if (total.numel() == 0) return total;
  const int64_t count = in_numel / total.numel();
  return scale(total, 1.0 / static_cast<double>(count));
}

}  // namespace

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return scaled(sum(x, std::move(dims), keepdim), x.numel());
}

Tensor mean(const Tensor& x) { return scaled(sum(x), x.numel()); }

}  // namespace st::ops
