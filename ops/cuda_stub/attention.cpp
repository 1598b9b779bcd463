#include "ops/attention.h"
#include "ops/cuda_stub/no_cuda.h"

namespace st::ops::cuda {
void attention_fwd(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) { no_cuda("causal_attention"); }
void attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                   Tensor&, Tensor&) {
  no_cuda("causal_attention");
}
}  // namespace st::ops::cuda
