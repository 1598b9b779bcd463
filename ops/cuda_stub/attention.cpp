#include "ops/attention.h"
#include "ops/cuda_stub/no_cuda.h"

namespace st::ops::cuda {
void attention_fwd(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) { no_cuda("causal_attention"); }
void attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                   Tensor&, Tensor&) {
  no_cuda("causal_attention");
}
bool attention_qkv_supported(const Tensor&, int64_t, int64_t) { return false; }
void attention_qkv_fwd(const Tensor&, Tensor&, Tensor&, int64_t, int64_t, const RopeTable*, int64_t) {
  no_cuda("causal_attention_qkv");
}
void attention_qkv_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, int64_t, int64_t,
                       const RopeTable*, int64_t) {
  no_cuda("causal_attention_qkv");
}
}  // namespace st::ops::cuda
