#include "ops/attention_merge.h"
#include "ops/block_attention.h"
#include "ops/cuda_stub/no_cuda.h"

namespace st::ops::cuda {
void block_attention_fwd(const Tensor&, const Tensor&, const Tensor&, BlockMask, Tensor&, Tensor&) {
  no_cuda("block_attention_fwd");
}
void attention_delta(const Tensor&, const Tensor&, Tensor&) { no_cuda("attention_delta"); }
void block_attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         BlockMask, Tensor&, Tensor&, Tensor&, const Tensor&) {
  no_cuda("block_attention_bwd");
}
void merge_attention(Tensor&, Tensor&, const Tensor&, const Tensor&) { no_cuda("merge_attention"); }
}  // namespace st::ops::cuda
