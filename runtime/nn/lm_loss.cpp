#include "runtime/nn/lm_loss.h"

#include "ops/cross_entropy.h"

namespace st::runtime {

Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  ST_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
               logits.size(1) == targets.size(1),
           ShapeError, "lm_loss: logits " << shape_str(logits.shape()) << " vs targets " << shape_str(targets.shape()));
  const int64_t V = logits.size(2);
  return ops::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));  // (B·T, V), (B·T) → ()
}

}  // namespace st::runtime
