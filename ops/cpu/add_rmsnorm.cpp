// CPU residual add + RMS normalisation: r in one pass (the sum in f32, rounded once on store, as
// ops::add), then rmsnorm's own row loop on r. Backward: rmsnorm's backward into dx, the
// residual's gradient added in place (Tensor::add_, the engine's sum) — the unfused ops'
// arithmetic on the same values, without their intermediate tensors.
#include "ops/add_rmsnorm.h"
#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/rmsnorm.h"

namespace st::ops::cpu {

void add_rmsnorm_fwd(const Tensor& x, const Tensor& a, const Tensor& w, float eps, Tensor& r, Tensor& y, Tensor& rstd) {
  {
    Tensor x32 = as_f32(x), a32 = as_f32(a);
    F32Out out(r);
    const float *px = x32.data<float>(), *pa = a32.data<float>();
    float* pr = out.data();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) pr[i] = px[i] + pa[i];
    out.store();
  }
  rmsnorm_fwd(r, w, eps, y, rstd);
}

void add_rmsnorm_bwd(const Tensor& r, const Tensor& w, const Tensor& rstd, const Tensor& dy, const Tensor& dr,
                     Tensor& dx, Tensor& dw) {
  if (!dy.defined()) {
    dx.copy_(dr);
    return;
  }
  rmsnorm_bwd(r, w, rstd, dy, dx, dw);  // dx = dRMS(dy), rounded to the dtype
  if (dr.defined()) dx.add_(dr);        // + dr, rounded once (a sum of two: either order)
}

}  // namespace st::ops::cpu
