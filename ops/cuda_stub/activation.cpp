#include "ops/activation.h"
#include "ops/cuda_stub/no_cuda.h"

namespace st::ops::cuda {
void gelu_fwd(const Tensor&, Tensor&) { no_cuda("gelu"); }
void gelu_bwd(const Tensor&, const Tensor&, Tensor&) { no_cuda("gelu"); }
void gelu_bwd_sum_cols(const Tensor&, const Tensor&, Tensor&, Tensor&) { no_cuda("gelu"); }
void relu_fwd(const Tensor&, Tensor&) { no_cuda("relu"); }
void relu_bwd(const Tensor&, const Tensor&, Tensor&) { no_cuda("relu"); }
void silu_fwd(const Tensor&, Tensor&) { no_cuda("silu"); }
void silu_bwd(const Tensor&, const Tensor&, Tensor&) { no_cuda("silu"); }
}  // namespace st::ops::cuda
