// A residual add fused with the RMS normalisation that reads it (a Llama decoder layer's
// h = x + attn(…) → post_attention_layernorm, and the next layer's x' = h + mlp(…) →
// input_layernorm, or the model's final norm):
//   r = x + a               the new residual stream (as ops::add)
//   y = rmsnorm(r; w)       as ops::rmsnorm (ops/rmsnorm.h)
// x, a, r, y (..., C), one dtype; w (C). Without a (undefined) r is x itself (a view of it): the op
// is then an rmsnorm whose backward also takes the residual's gradient (the first layer's input).
// No dropout: Llama has none on the residual stream.
// r and y are the outputs of one autograd node; its backward gets dr and dy (either may be
// undefined: an output nobody differentiated) and writes fresh tensors (=):
//   g  = dr + dRMS(dy)      the gradient of r (dRMS: rmsnorm's dx)
//   dx = da = g (one tensor, returned for both),  dw = rmsnorm's
// Bit-identical to the unfused ops (ops::add then ops::rmsnorm, autograd summing r's two
// gradients), forward and backward, CPU and CUDA: r is the add's sum of x and a in f32 rounded
// once to the dtype; y, dRMS, dw come from rmsnorm's row kernels; g is dRMS rounded to the dtype,
// then added to dr in f32 and rounded (a sum of two terms, so its order does not matter).
// Saves r and rstd (N) f32 (as rmsnorm saves its input).
#pragma once
#include "ops/residual_norm.h"
#include "tensor/tensor.h"

namespace st::ops {

ResidualNorm add_rmsnorm(const Tensor& x, const Tensor& a, const Tensor& w, float eps = 1e-6f);

// Backend kernels: x, a, r, y, dy, dr, dx (N, C) contiguous; w, dw (C); one dtype; rstd (N) f32.
//   fwd: r = x + a, y, rstd = rmsnorm(r); all written (=)
//   bwd: r, rstd the forward's; dr or dy may be undefined (not both); dx = dr + dRMS(dy) (=);
//        dw from dy (=; undefined and not written when dy is)
namespace cpu {
void add_rmsnorm_fwd(const Tensor& x, const Tensor& a, const Tensor& w, float eps, Tensor& r, Tensor& y, Tensor& rstd);
void add_rmsnorm_bwd(const Tensor& r, const Tensor& w, const Tensor& rstd, const Tensor& dy, const Tensor& dr,
                     Tensor& dx, Tensor& dw);
}  // namespace cpu
namespace cuda {
void add_rmsnorm_fwd(const Tensor& x, const Tensor& a, const Tensor& w, float eps, Tensor& r, Tensor& y, Tensor& rstd);
void add_rmsnorm_bwd(const Tensor& r, const Tensor& w, const Tensor& rstd, const Tensor& dy, const Tensor& dr,
                     Tensor& dx, Tensor& dw);
}  // namespace cuda

}  // namespace st::ops
