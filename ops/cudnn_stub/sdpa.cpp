// CUDA builds without cuDNN: attention always takes the flash kernels (ops/cuda/flash_attention.cu).
#include "ops/cuda/sdpa_cudnn.h"

namespace st::ops::cuda {
bool cudnn_sdpa_fwd(DType, int64_t, int64_t, int64_t, int64_t, int64_t, AttnOperand, AttnOperand, AttnOperand,
                    AttnOperand, float*, cudaStream_t, const std::function<void()>&) {
  return false;
}
bool cudnn_sdpa_bwd(DType, int64_t, int64_t, int64_t, int64_t, int64_t, AttnOperand, AttnOperand, AttnOperand,
                    AttnOperand, AttnOperand, const float*, AttnOperand, AttnOperand, AttnOperand, bool, cudaStream_t,
                    const std::function<void()>&) {
  return false;
}
bool cudnn_block_fwd(DType, int64_t, int64_t, int64_t, int64_t, int64_t, AttnOperand, AttnOperand, AttnOperand,
                     AttnOperand, float*, bool, cudaStream_t) {
  return false;
}
bool cudnn_block_bwd(DType, int64_t, int64_t, int64_t, int64_t, int64_t, AttnOperand, AttnOperand, AttnOperand,
                     AttnOperand, AttnOperand, const float*, AttnOperand, AttnOperand, AttnOperand, bool, bool,
                     cudaStream_t) {
  return false;
}
std::string cudnn_sdpa_status() { return "cuDNN not built (attention uses the flash kernels)"; }
int64_t cudnn_sdpa_calls() { return 0; }
}  // namespace st::ops::cuda
