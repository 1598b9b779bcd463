// CPU fused LM head + cross-entropy (ops/lm_head_loss.h). Everything in f32 through sgemm, with the
// unfused path's arithmetic step for step (ops/cpu/matmul.cpp, ops/cpu/cross_entropy.cpp): the
// logits rounded to h's dtype as the unfused matmul stores them, each row's max and Σ exp (in
// double) and loss in double as cross_entropy_fwd, the gradient exp(x − lse)·σ − σ·onehot as
// cross_entropy_bwd writes it (rounded to h's dtype), and the products over the same depth blocks.
// So with power-of-two k = dloss/count, σ and chunk rows a multiple of 256 (or one chunk) the loss
// and both gradients equal the unfused path's bit for bit, in f32 and in f16/bf16.
#include <algorithm>
#include <cmath>

#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "ops/cpu/f32_out.h"  // require_contiguous_cpu
#include "ops/cpu/sgemm.h"
#include "ops/lm_head_loss.h"

namespace st::ops::cpu {
namespace {

int64_t target(const Tensor& t, int64_t n) {
  return t.dtype() == DType::i32 ? static_cast<int64_t>(t.data<int32_t>()[n]) : t.data<int64_t>()[n];
}

// p[0, n) ← the value p holds after a store to `dt` and a load back (round to nearest even).
void round_to(float* p, int64_t n, DType dt) {
  if (dt == DType::bf16)
    for (int64_t i = 0; i < n; ++i) p[i] = bf16_bits_to_f32(f32_to_bf16_bits(p[i]));
  else if (dt == DType::f16)
    for (int64_t i = 0; i < n; ++i) p[i] = f16_bits_to_f32(f32_to_f16_bits(p[i]));
}

}  // namespace

void lm_head_loss_fwd(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t ignore_index, int64_t rows,
                      float sigma, Tensor& loss, Tensor& count, Tensor* dh, Tensor* dw) {
  for (const Tensor* t : {&h, &w, &targets}) require_contiguous_cpu("lm_head_cross_entropy", *t);
  const int64_t N = h.size(0), C = h.size(1), V = w.size(0);
  const DType dt = h.dtype();
  const bool grad = dh != nullptr || dw != nullptr;
  Tensor w32 = as_f32(w);                                                  // (V, C)
  Tensor x = Tensor::empty({std::min(rows, N), V}, DType::f32, Device::cpu);  // (rows, V): the one chunk buffer
  const float* pw = w32.data<float>();
  float* px = x.data<float>();
  if (dw != nullptr && N == 0) dw->fill_(0.0);
  double total = 0;
  int64_t counted = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    Tensor hc = as_f32(h.narrow(0, r0, n));  // (n, C)
    const float* ph = hc.data<float>();
    sgemm(ph, false, pw, true, px, n, V, C);  // (n, C)·(V, C)ᵀ
    round_to(px, n * V, dt);
    for (int64_t i = 0; i < n; ++i) {
      float* xr = px + i * V;
      float mx = -INFINITY;
      for (int64_t c = 0; c < V; ++c) mx = std::max(mx, xr[c]);
      double s = 0;
      for (int64_t c = 0; c < V; ++c) s += exp_f32(xr[c] - mx);
      const double ls = log_f64(s);
      const float lse = mx + static_cast<float>(ls);
      const int64_t t = target(targets, r0 + i);
      const bool counts = t != ignore_index;
      if (counts) {
        if (t < 0 || t >= V)
          ST_THROW(ValueError, "lm_head_cross_entropy: target " << t << " at position " << r0 + i
                                                                << " is outside [0, V = " << V
                                                                << ") and is not ignore_index " << ignore_index);
        total += ls - static_cast<double>(xr[t] - mx);  // lse − x_t without cancellation at large x
        ++counted;
      }
      if (!grad) continue;
      if (!counts) {
        std::fill_n(xr, V, 0.f);
        continue;
      }
      for (int64_t c = 0; c < V; ++c) xr[c] = exp_f32(xr[c] - lse) * sigma;
      xr[t] -= sigma;
    }
    if (!grad) continue;
    round_to(px, n * V, dt);  // the gradient as the unfused path stores it in h's dtype
    if (dh != nullptr) sgemm(px, false, pw, false, dh->data<float>() + r0 * C, n, C, V);            // (n, V)·(V, C)
    if (dw != nullptr) sgemm(px, true, ph, false, dw->data<float>(), V, C, n, /*accumulate=*/r0 > 0);  // (n, V)ᵀ·(n, C)
  }
  loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(counted));
  count.data<float>()[0] = static_cast<float>(counted);
}

void lm_head_loss_scale(const Tensor& src, const Tensor& dloss, const Tensor& count, float sigma, Tensor& dst) {
  require_contiguous_cpu("lm_head_cross_entropy", src);
  const float cnt = count.data<float>()[0];
  const float k = (cnt > 0.f ? dloss.data<float>()[0] / cnt : 0.f) / sigma;  // σ a power of two: exact
  require_contiguous_cpu("lm_head_cross_entropy", dst);
  const float* ps = src.data<float>();
  const int64_t n = src.numel();
  // rounded once, straight into dst (no f32 scratch of its size)
  if (dst.dtype() == DType::bf16) {
    BFloat16* pd = dst.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) pd[i] = to_bf16(ps[i] * k);
  } else if (dst.dtype() == DType::f16) {
    Half* pd = dst.data<Half>();
    for (int64_t i = 0; i < n; ++i) pd[i] = to_half(ps[i] * k);
  } else {
    float* pd = dst.data<float>();
    for (int64_t i = 0; i < n; ++i) pd[i] = ps[i] * k;
  }
}

}  // namespace st::ops::cpu
