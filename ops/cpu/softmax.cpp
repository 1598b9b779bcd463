// CPU softmax / log-softmax over contiguous rows: max, Σ exp(x − max) in f32, then one pass to
// write. Row sums of the backward accumulate in double (rows can be long, e.g. a vocabulary).
#include <cmath>

#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "ops/cpu/f32_out.h"
#include "ops/softmax.h"

namespace st::ops::cpu {

void softmax_fwd(const Tensor& x, Tensor& y, bool log) {
  Tensor x32 = as_f32(x);
  F32Out out(y);
  const int64_t C = x.size(-1), R = x.numel() / C;
  const float* px = x32.data<float>();
  float* py = out.data();
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = px + r * C;
    float* yr = py + r * C;
    float mx = -INFINITY;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float e = exp_f32(xr[c] - mx);
      if (!log) yr[c] = e;
      sum += e;
    }
    if (log) {
      const float ls = static_cast<float>(log_f64(sum));  // (x − max) − log Σ: no cancellation at large x
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mx) - ls;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
    }
  }
  out.store();
}

void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  Tensor y32 = as_f32(y), g32 = as_f32(dy);
  F32Out out(dx);
  const int64_t C = y.size(-1), R = y.numel() / C;
  const float* py = y32.data<float>();
  const float* pg = g32.data<float>();
  float* pd = out.data();
  for (int64_t r = 0; r < R; ++r) {
    const float* yr = py + r * C;
    const float* gr = pg + r * C;
    float* dr = pd + r * C;
    double s = 0;
    if (log) {
      for (int64_t c = 0; c < C; ++c) s += gr[c];
      const float fs = static_cast<float>(s);
      for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] - exp_f32(yr[c]) * fs;
    } else {
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(gr[c]) * yr[c];
      const float fs = static_cast<float>(s);
      for (int64_t c = 0; c < C; ++c) dr[c] = yr[c] * (gr[c] - fs);
    }
  }
  out.store();
}

}  // namespace st::ops::cpu
