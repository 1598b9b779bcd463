// A residual add fused with the layer normalisation that reads it (the pre-LN GPT block's
// x + attn(…) → ln_2, the post-LN encoder's norm(x + dropout(…))):
//   r = x + dropout(a)      the new residual stream; dropout as ops::dropout (element i of a kept
//                           iff philox_uniform(seed, offset + i) ≥ p, scaled by 1/(1 − p)), or none
//   y = layernorm(r; w, b)  as ops::layernorm (ops/layernorm.h)
// x, a, r, y (..., C), one dtype; w, b (C). Without a (undefined) r is x itself (a view of it): the
// op is then a layernorm whose backward also takes the residual's gradient.
// r and y are the outputs of one autograd node; its backward gets dr and dy (either may be
// undefined: an output nobody differentiated) and writes fresh tensors (=):
//   g  = dr + dLN(dy)              the gradient of r (dLN: layernorm's dx)
//   dx = g,  da = g·mask/(1 − p)   (da is dx itself without dropout),  dw, db = layernorm's
// Bit-identical to the unfused ops, forward and backward, CPU and CUDA: r is the add's rounded
// sum of x and the dropout's rounded output; y, dLN, dw, db come from layernorm's row kernels; g
// is dLN rounded to the dtype, then added to dr and rounded — what autograd's sum of r's two
// consumers gives (a sum of two terms, so its order does not matter).
// Saves r and the row statistics (as layernorm saves its input); the mask is regenerated.
#pragma once
#include <cstdint>

#include "ops/residual_norm.h"
#include "tensor/tensor.h"

namespace st::ops {

ResidualNorm add_layernorm(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, float eps = 1e-5f);
// With dropout on a; !training or p == 0 is add_layernorm. Draws nothing (explicit counters).
ResidualNorm dropout_add_layernorm(const Tensor& x, const Tensor& a, float p, uint64_t seed, uint64_t offset,
                                   bool training, const Tensor& w, const Tensor& b, float eps = 1e-5f);
// The same with the seed in a one-element i64 tensor on x's device, read when the mask is made
// (forward and backward), as the matching ops::dropout overload does for a step captured as a
// CUDA graph. Same masks as the overload above for the same seed value.
ResidualNorm dropout_add_layernorm(const Tensor& x, const Tensor& a, float p, const Tensor& seed, uint64_t offset,
                                   bool training, const Tensor& w, const Tensor& b, float eps = 1e-5f);

// The dropout of a: none when p == 0; the seed is `seed`, or the i64 element `seed_at` points to
// when that is defined (a device tensor for CUDA, read by the kernel).
struct ResidualDropout {
  float p = 0.f;
  uint64_t seed = 0, offset = 0;
  Tensor seed_at;
};

// Backend kernels: x, a, r, y, dy, dr, dx, da (N, C) contiguous; w, b, dw, db (C); one dtype;
// mean, rstd (N) f32.
//   fwd: r = x + dropout(a), y, mean, rstd = layernorm(r); all written (=)
//   bwd: r, mean, rstd the forward's; dr or dy may be undefined (not both); dx = dr + dLN(dy);
//        da = dropout(dx), only with dropout (else undefined and not written); dw, db from dy
//        (undefined when dy is)
namespace cpu {
void add_layernorm_fwd(const Tensor& x, const Tensor& a, const ResidualDropout& d, const Tensor& w, const Tensor& b,
                       float eps, Tensor& r, Tensor& y, Tensor& mean, Tensor& rstd);
void add_layernorm_bwd(const Tensor& r, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                       const Tensor& dr, const ResidualDropout& d, Tensor& dx, Tensor& da, Tensor& dw, Tensor& db);
}  // namespace cpu
namespace cuda {
void add_layernorm_fwd(const Tensor& x, const Tensor& a, const ResidualDropout& d, const Tensor& w, const Tensor& b,
                       float eps, Tensor& r, Tensor& y, Tensor& mean, Tensor& rstd);
void add_layernorm_bwd(const Tensor& r, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                       const Tensor& dr, const ResidualDropout& d, Tensor& dx, Tensor& da, Tensor& dw, Tensor& db);
}  // namespace cuda

}  // namespace st::ops
