// Cross-entropy of logits against integer targets, mean over the counted targets:
//   logits (..., V) any float dtype, targets (...) i32/i64 → loss () f32, computed in f32:
//   loss = Σ_{n: t_n ≠ ignore} (logsumexp(logits_n) − logits_n[t_n]) / count,
//   count = #{n: t_n ≠ ignore}. All targets ignored → 0/0 = NaN (PyTorch's answer).
//   A target outside [0, V) that is not ignore_index → ValueError naming it and V.
// Saves the per-row log-sum-exp (N) f32 and count; backward is fused into one pass over the
// logits: dlogits = (softmax(logits) − onehot(t)) · dloss / count, 0 on ignored rows, written in
// logits' dtype as a fresh tensor (=). The softmax is recomputed as exp(logit − lse).
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace st::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// Backend kernels: logits (N, V) contiguous, targets (N) contiguous i32/i64, all on one device.
//   fwd writes loss () f32 (the mean), lse (N) f32 and count () f32 (number of counted rows);
//       it throws ValueError for a target outside [0, V) that is not ignore_index.
//   bwd reads dloss () f32 and count () f32 from device memory (no host sync) and writes
//       dlogits (N, V) in logits' dtype.
namespace cpu {
void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss, Tensor& lse,
                       Tensor& count);
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& count,
                       const Tensor& dloss, int64_t ignore_index, Tensor& dlogits);
}  // namespace cpu
namespace cuda {
void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss, Tensor& lse,
                       Tensor& count);
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& count,
                       const Tensor& dloss, int64_t ignore_index, Tensor& dlogits);
}  // namespace cuda

}  // namespace st::ops
