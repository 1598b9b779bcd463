#include "ops/mlp.h"

#include "ops/activation.h"
#include "ops/check.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

bool fusable(std::initializer_list<const Tensor*> ts) {
  const DType dt = (*ts.begin())->dtype();
  for (const Tensor* t : ts)
    if (!t->is_cuda() || t->dtype() != dt || (dt != DType::f16 && dt != DType::bf16)) return false;
  return true;
}

// x2 (M, C) → y (M, N) with both GEMMs fused; undefined when cuBLASLt has no kernel for either
Tensor mlp_fused(const Tensor& x2, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  const int64_t M = x2.size(0), C = x2.size(1), F = w1.size(1), N = w2.size(1);
  const DType dt = x2.dtype();
  const Device dev = x2.device();
  Tensor xd = x2.detach().contiguous(), w1d = w1.detach().contiguous(), b1d = b1.detach().contiguous();
  Tensor w2d = w2.detach().contiguous(), b2d = b2.detach().contiguous();
  Tensor pre = Tensor::empty({M, F}, dt, dev), h = Tensor::empty({M, F}, dt, dev);  // (M, F) each
  Tensor y = Tensor::empty({M, N}, dt, dev);                                        // (M, N)
  {
    NoGradGuard ng;
    using cuda::LtEpilogue;
    if (!cuda::gemm_lt(xd, w1d, h, false, false, M, F, C, LtEpilogue::gelu_bias, b1d, pre, Tensor()))
      return Tensor();
    if (!cuda::gemm_lt(h, w2d, y, false, false, M, N, F, LtEpilogue::bias, b2d, Tensor(), Tensor()))
      return Tensor();
  }
  attach_grad_fn(y, "mlp_gelu", {x2, w1, b1, w2, b2}, [xd, w1d, w2d, pre, h, M, F, N](const Tensor& g_in) {
    NoGradGuard ng;
    using cuda::LtEpilogue;
    const DType dt = xd.dtype();
    const Device dev = xd.device();
    Tensor g = contiguous_as(g_in, dt);  // (M, N)
    Tensor dw2 = Tensor::empty({F, N}, dt, dev), db2 = Tensor::empty({N}, dt, dev);
    if (!cuda::gemm_lt(h, g, dw2, true, false, F, N, M, LtEpilogue::bgrad_b, Tensor(), Tensor(), db2)) {
      dw2 = matmul(h, g, true, false);
      db2 = sum(g, {0});
    }
    // dpre = (dy·w2ᵀ) ∘ gelu'(pre) and db1 = Σ_rows dpre in one pass over pre and dh. Not through
    // cuBLASLt's DGELU_BGRAD epilogue: on the H200 it runs as a separate pass that took 0.32 ms at
    // 16384 × 3072 (f16), where the GELU-gradient kernel plus the column sum take 0.11 ms.
    Tensor dh = matmul(g, w2d, false, true);  // (M, F)
    Tensor dpre = Tensor::empty({M, F}, dt, dev), db1 = Tensor::empty({F}, dt, dev);  // (M, F), (F)
    cuda::gelu_bwd_sum_cols(pre, dh, dpre, db1);
    Tensor dw1 = matmul(xd, dpre, true, false);  // (C, F)
    Tensor dx = matmul(dpre, w1d, false, true);  // (M, C)
    return std::vector<Tensor>{dx, dw1, db1, dw2, db2};
  });
  return y;
}

}  // namespace

Tensor mlp_gelu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  check_defined("mlp_gelu", {x, w1, b1, w2, b2});
  if (w1.dim() != 2 || w2.dim() != 2 || b1.dim() != 1 || b2.dim() != 1 || x.size(-1) != w1.size(0) ||
      b1.size(0) != w1.size(1) || w2.size(0) != w1.size(1) || b2.size(0) != w2.size(1))
    ST_THROW(ShapeError, "mlp_gelu: x " << shape_str(x.shape()) << ", w1 " << shape_str(w1.shape()) << ", b1 "
                                        << shape_str(b1.shape()) << ", w2 " << shape_str(w2.shape()) << ", b2 "
                                        << shape_str(b2.shape()) << " (expected (..., C), (C, F), (F), (F, N), (N))");
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // (M, C)
  Tensor y;
  if (fusable({&x2, &w1, &b1, &w2, &b2})) y = mlp_fused(x2, w1, b1, w2, b2);
  if (!y.defined()) y = linear(gelu(linear(x2, w1, b1)), w2, b2);
  if (x.dim() == 2) return y;
  Shape s = x.shape();
  s.back() = w2.size(1);
  return y.reshape(s);
}

}  // namespace st::ops
