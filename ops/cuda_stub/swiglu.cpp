#include "ops/cuda_stub/no_cuda.h"
#include "ops/swiglu.h"

namespace st::ops::cuda {
void swiglu_fwd(const Tensor&, Tensor&) { no_cuda("swiglu"); }
void swiglu_bwd(const Tensor&, const Tensor&, Tensor&) { no_cuda("swiglu"); }
}  // namespace st::ops::cuda
