#include "ops/cuda_stub/no_cuda.h"
#include "ops/dropout.h"

namespace st::ops::cuda {
void dropout_fwd(const Tensor&, float, uint64_t, uint64_t, Tensor&) { no_cuda("dropout"); }
void dropout_fwd_seed_at(const Tensor&, float, const uint64_t*, uint64_t, Tensor&) { no_cuda("dropout"); }
}  // namespace st::ops::cuda
