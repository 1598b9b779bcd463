// CPU SwiGLU: one plain loop over the rows of the packed [gate | up], forward and backward, with
// ops/cpu/silu.h's f32 formulas and the roundings to the dtype ops/swiglu.h states (those of the
// unfused silu and mul, whose stored outputs are rounded).
#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/cpu/silu.h"
#include "ops/swiglu.h"

namespace st::ops::cpu {

void swiglu_fwd(const Tensor& gu, Tensor& y) {
  Tensor gu32 = as_f32(gu);
  F32Out out(y);
  const int64_t M = y.size(0), F = y.size(1);
  const DType dt = gu.dtype();
  const float* pgu = gu32.data<float>();
  float* py = out.data();
  for (int64_t m = 0; m < M; ++m) {
    const float *g = pgu + m * 2 * F, *u = g + F;  // gate, up (F) each
    float* yr = py + m * F;
    for (int64_t f = 0; f < F; ++f) yr[f] = round_to(dt, silu_f32(g[f])) * u[f];
  }
  out.store();
}

void swiglu_bwd(const Tensor& gu, const Tensor& dy, Tensor& dgu) {
  Tensor gu32 = as_f32(gu), dy32 = as_f32(dy);
  F32Out out(dgu);
  const int64_t M = dy.size(0), F = dy.size(1);
  const DType dt = gu.dtype();
  const float *pgu = gu32.data<float>(), *pdy = dy32.data<float>();
  float* pd = out.data();
  for (int64_t m = 0; m < M; ++m) {
    const float *g = pgu + m * 2 * F, *u = g + F, *d = pdy + m * F;
    float *dg = pd + m * 2 * F, *du = dg + F;
    for (int64_t f = 0; f < F; ++f) {
      du[f] = d[f] * round_to(dt, silu_f32(g[f]));
      dg[f] = silu_grad_f32(g[f], round_to(dt, d[f] * u[f]));
    }
  }
  out.store();
}

}  // namespace st::ops::cpu
