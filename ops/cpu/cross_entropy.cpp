// CPU cross-entropy: one pass per row for max and Σ exp in f32 (the sum in double), the loss
// summed over rows in double and divided once; the fused backward recomputes the softmax from
// the saved log-sum-exp.
#include <cmath>

#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "ops/cpu/f32_out.h"
#include "ops/cross_entropy.h"

namespace st::ops::cpu {
namespace {
template <class I>
int64_t target_at(const Tensor& t, int64_t n) {
  return static_cast<int64_t>(t.data<I>()[n]);
}
int64_t target(const Tensor& t, int64_t n) {
  return t.dtype() == DType::i32 ? target_at<int32_t>(t, n) : target_at<int64_t>(t, n);
}
}  // namespace

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss, Tensor& lse,
                       Tensor& count) {
  Tensor x32 = as_f32(logits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* px = x32.data<float>();
  float* plse = lse.data<float>();
  double total = 0;
  int64_t counted = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * V;
    float mx = -INFINITY;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, xr[c]);
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += exp_f32(xr[c] - mx);
    const double ls = log_f64(s);
    plse[n] = mx + static_cast<float>(ls);
    const int64_t t = target(targets, n);
    if (t == ignore_index) continue;
    if (t < 0 || t >= V)
      ST_THROW(ValueError, "cross_entropy: target " << t << " at position " << n << " is outside [0, V = " << V
                                                    << ") and is not ignore_index " << ignore_index);
    total += ls - static_cast<double>(xr[t] - mx);  // lse − x_t without cancellation at large x
    ++counted;
  }
  loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(counted));
  count.data<float>()[0] = static_cast<float>(counted);
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& count,
                       const Tensor& dloss, int64_t ignore_index, Tensor& dlogits) {
  Tensor x32 = as_f32(logits);
  F32Out out(dlogits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* px = x32.data<float>();
  const float* plse = lse.data<float>();
  float* pd = out.data();
  const float cnt = count.data<float>()[0];
  const float k = cnt > 0.f ? dloss.data<float>()[0] / cnt : 0.f;
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * V;
    float* dr = pd + n * V;
    const int64_t t = target(targets, n);
    if (t == ignore_index) {
      for (int64_t c = 0; c < V; ++c) dr[c] = 0.f;
      continue;
    }
    for (int64_t c = 0; c < V; ++c) dr[c] = exp_f32(xr[c] - plse[n]) * k;
    dr[t] -= k;
  }
  out.store();
}

}  // namespace st::ops::cpu
