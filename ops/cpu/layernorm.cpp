// CPU layernorm: one row at a time; statistics in double, normalisation and affine in f32.
// Backward keeps dw/db column sums in double so that long batches do not lose bits.
#include <cmath>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/layernorm.h"

namespace st::ops::cpu {

void layernorm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  Tensor x32 = as_f32(x), w32 = as_f32(w), b32 = as_f32(b);
  F32Out out(y);
  const int64_t N = x.size(0), C = x.size(1);
  const float *px = x32.data<float>(), *pw = w32.data<float>(), *pb = b32.data<float>();
  float *py = out.data(), *pm = mean.data<float>(), *pr = rstd.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const double mu = s / static_cast<double>(C);
    double v = 0;
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const float m = static_cast<float>(mu);
    const float r = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(C) + static_cast<double>(eps)));
    pm[n] = m;
    pr[n] = r;
    float* yr = py + n * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * pw[c] + pb[c];
  }
  out.store();
}

void layernorm_bwd(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db) {
  Tensor x32 = as_f32(x), w32 = as_f32(w), g32 = as_f32(dy);
  F32Out odx(dx), odw(dw), odb(db);
  const int64_t N = x.size(0), C = x.size(1);
  const float *px = x32.data<float>(), *pw = w32.data<float>(), *pg = g32.data<float>();
  const float *pm = mean.data<float>(), *pr = rstd.data<float>();
  float* pdx = odx.data();
  std::vector<double> sdw(static_cast<size_t>(C), 0.0), sdb(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float *xr = px + n * C, *gr = pg + n * C;
    const float m = pm[n], r = pr[n];
    double sg = 0, sgn = 0;  // Σ g, Σ g·n̂ with g = dy·w
    for (int64_t c = 0; c < C; ++c) {
      const float nh = (xr[c] - m) * r;
      const float g = gr[c] * pw[c];
      sg += g;
      sgn += static_cast<double>(g) * nh;
      sdw[c] += static_cast<double>(gr[c]) * nh;
      sdb[c] += gr[c];
    }
    const float mg = static_cast<float>(sg / static_cast<double>(C));
    const float mgn = static_cast<float>(sgn / static_cast<double>(C));
    float* dr = pdx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float nh = (xr[c] - m) * r;
      dr[c] = r * (gr[c] * pw[c] - mg - nh * mgn);
    }
  }
  float *pdw = odw.data(), *pdb = odb.data();
  for (int64_t c = 0; c < C; ++c) {
    pdw[c] = static_cast<float>(sdw[c]);
    pdb[c] = static_cast<float>(sdb[c]);
  }
  odx.store();
  odw.store();
  odb.store();
}

}  // namespace st::ops::cpu
