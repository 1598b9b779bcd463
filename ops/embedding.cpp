#include "ops/embedding.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor embedding(const Tensor& weight_in, const Tensor& idx_in) {
  const char* name = "embedding";
  check_same_device(name, {weight_in, idx_in});
  check_floating(name, weight_in);
  check_dtype(name, idx_in, {DType::i32, DType::i64});
  if (weight_in.dim() != 2)
    ST_THROW(ShapeError, name << ": weight " << weight_in.describe() << " must be (V, C); indices " << idx_in.describe());
  const int64_t V = weight_in.size(0), C = weight_in.size(1), N = idx_in.numel();
  Tensor weight = contiguous_as(weight_in, weight_in.dtype());  // (V, C)
  Tensor idx = contiguous_as(idx_in, idx_in.dtype()).view({N});  // (N)
  Tensor out = Tensor::empty({N, C}, weight.dtype(), weight.device());  // (N, C)
  {
    NoGradGuard ng;
    if (weight.is_cuda())
      cuda::embedding_fwd(weight, idx, out);
    else
      cpu::embedding_fwd(weight, idx, out);
  }
  Shape oshape = idx_in.shape();
  oshape.push_back(C);
  out = out.view(oshape).detach();
  // backward: dout (..., C) → dweight (V, C) = scatter-add of dout rows at idx, fresh tensor
  attach_grad_fn(out, name, {weight_in}, [idx, V, C, N, dt = weight.dtype()](const Tensor& g) {
    Tensor dout = contiguous_as(g, dt).view({N, C});
    Tensor dweight = Tensor::empty({V, C}, dt, g.device());
    if (g.is_cuda())
      cuda::embedding_bwd(idx, dout, dweight);
    else
      cpu::embedding_bwd(idx, dout, dweight);
    return std::vector<Tensor>{dweight};
  });
  return out;
}

}  // namespace st::ops
