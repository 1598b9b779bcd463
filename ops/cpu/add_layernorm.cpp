// CPU residual add + layernorm: r in one pass (the dropout's output rounded to the dtype as that op
// stores it, then the sum in f32, rounded once on store, as ops::add), then layernorm's own row
// loop on r. Backward: layernorm's backward into dx, the residual's gradient added in place
// (Tensor::add_, the engine's sum), the dropout kernel on the result — the unfused ops' arithmetic
// on the same values, with none of their intermediate tensors.
#include "ops/add_layernorm.h"
#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/dropout.h"
#include "ops/layernorm.h"
#include "tensor/philox.h"

namespace st::ops::cpu {
namespace {

uint64_t seed_of(const ResidualDropout& d) {
  return d.seed_at.defined() ? static_cast<uint64_t>(*d.seed_at.data<int64_t>()) : d.seed;
}

}  // namespace

void add_layernorm_fwd(const Tensor& x, const Tensor& a, const ResidualDropout& d, const Tensor& w, const Tensor& b,
                       float eps, Tensor& r, Tensor& y, Tensor& mean, Tensor& rstd) {
  {
    Tensor x32 = as_f32(x), a32 = as_f32(a);
    F32Out out(r);
    const float *px = x32.data<float>(), *pa = a32.data<float>();
    float* pr = out.data();
    const int64_t n = x.numel();
    const DType dt = x.dtype();
    if (d.p > 0.f) {  // ops::dropout's element (cpu::dropout_fwd), stored in dt, then the add
      const float scale = d.p < 1.f ? 1.f / (1.f - d.p) : 0.f;
      const uint64_t seed = seed_of(d);
      for (int64_t i = 0; i < n; ++i) {
        const float v = philox_uniform_lane(seed, d.offset + static_cast<uint64_t>(i)) < d.p ? 0.f : pa[i] * scale;
        pr[i] = px[i] + round_to(dt, v);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) pr[i] = px[i] + pa[i];
    }
    out.store();
  }
  layernorm_fwd(r, w, b, eps, y, mean, rstd);
}

void add_layernorm_bwd(const Tensor& r, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                       const Tensor& dr, const ResidualDropout& d, Tensor& dx, Tensor& da, Tensor& dw, Tensor& db) {
  if (dy.defined()) {
    layernorm_bwd(r, w, mean, rstd, dy, dx, dw, db);  // dx = dLN(dy), rounded to the dtype
    if (dr.defined()) dx.add_(dr);                    // + dr, rounded once (a sum of two: either order)
  } else {
    dx.copy_(dr);
  }
  if (da.defined()) dropout_fwd(dx, d.p, seed_of(d), d.offset, da);  // da = mask·dx/(1 − p)
}

}  // namespace st::ops::cpu
