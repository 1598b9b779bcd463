// CPU RMS normalisation: one row at a time in a fixed order. The mean of the squares and the
// backward's row dot product and dw column sums accumulate in double; everything else is the f32
// arithmetic ops/rmsnorm.h states, in its order (Hugging Face's), with -ffp-contract=off keeping
// every product and sum its own rounding.
#include <cmath>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/rmsnorm.h"

namespace st::ops::cpu {

void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  Tensor x32 = as_f32(x), w32 = as_f32(w);
  F32Out out(y);
  const int64_t N = x.size(0), C = x.size(1);
  const DType dt = x.dtype();
  const float *px = x32.data<float>(), *pw = w32.data<float>();
  float *py = out.data(), *pr = rstd.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];  // each f32 square rounded, summed in double
    const float var = static_cast<float>(ss / static_cast<double>(C));
    const float r = 1.f / std::sqrt(var + eps);  // IEEE sqrt and division: the same bits on every CPU
    pr[n] = r;
    float* yr = py + n * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = pw[c] * round_to(dt, xr[c] * r);
  }
  out.store();
}

void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw) {
  Tensor x32 = as_f32(x), w32 = as_f32(w), g32 = as_f32(dy);
  F32Out odx(dx), odw(dw);
  const int64_t N = x.size(0), C = x.size(1);
  const DType dt = x.dtype();
  const float *px = x32.data<float>(), *pw = w32.data<float>(), *pg = g32.data<float>(), *pr = rstd.data<float>();
  float* pdx = odx.data();
  std::vector<double> sdw(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float *xr = px + n * C, *gr = pg + n * C;
    const float r = pr[n];
    double sgn = 0;  // Σ g·n̂ with g = dy·w, n̂ = x·rstd
    for (int64_t c = 0; c < C; ++c) {
      const float nh = xr[c] * r;
      sgn += static_cast<double>(gr[c] * pw[c]) * nh;
      sdw[c] += static_cast<double>(gr[c]) * round_to(dt, nh);
    }
    const float mgn = static_cast<float>(sgn / static_cast<double>(C));
    float* dr = pdx + n * C;
    for (int64_t c = 0; c < C; ++c) dr[c] = r * (gr[c] * pw[c] - xr[c] * r * mgn);
  }
  float* pdw = odw.data();
  for (int64_t c = 0; c < C; ++c) pdw[c] = static_cast<float>(sdw[c]);
  odx.store();
  odw.store();
}

}  // namespace st::ops::cpu
