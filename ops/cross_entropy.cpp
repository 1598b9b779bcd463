#include "ops/cross_entropy.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index) {
  const char* name = "cross_entropy";
  check_same_device(name, {logits_in, targets_in});
  check_floating(name, logits_in);
  check_dtype(name, targets_in, {DType::i32, DType::i64});
  Shape expect(logits_in.shape().begin(), logits_in.shape().end() - (logits_in.dim() > 0 ? 1 : 0));
  if (logits_in.dim() < 1 || logits_in.size(-1) == 0 || targets_in.shape() != expect)
    ST_THROW(ShapeError, name << ": logits " << logits_in.describe() << " (expected (..., V)) and targets "
                              << targets_in.describe() << " (expected the logits' shape without V) do not fit");
  const int64_t V = logits_in.size(-1), N = logits_in.numel() / V;
  Tensor logits = contiguous_as(logits_in, logits_in.dtype()).view({N, V});          // (N, V)
  Tensor targets = contiguous_as(targets_in, targets_in.dtype()).view({N});          // (N)
  const Device dev = logits.device();
  Tensor loss = Tensor::empty({}, DType::f32, dev);   // ()
  Tensor lse = Tensor::empty({N}, DType::f32, dev);   // (N)
  Tensor count = Tensor::empty({}, DType::f32, dev);  // ()
  {
    NoGradGuard ng;
    if (logits.is_cuda())
      cuda::cross_entropy_fwd(logits, targets, ignore_index, loss, lse, count);
    else
      cpu::cross_entropy_fwd(logits, targets, ignore_index, loss, lse, count);
  }
  // backward: dloss () → dlogits (..., V) = (softmax − onehot)·dloss/count, fresh tensor
  Shape lshape = logits_in.shape();
  attach_grad_fn(loss, name, {logits_in}, [logits, targets, lse, count, ignore_index, lshape](const Tensor& g) {
    Tensor dloss = contiguous_as(g, DType::f32);
    Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    if (logits.is_cuda())
      cuda::cross_entropy_bwd(logits, targets, lse, count, dloss, ignore_index, dlogits);
    else
      cpu::cross_entropy_bwd(logits, targets, lse, count, dloss, ignore_index, dlogits);
    return std::vector<Tensor>{dlogits.view(lshape)};
  });
  return loss;
}

}  // namespace st::ops
