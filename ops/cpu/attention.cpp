// CPU causal attention, q, k, v (B, H, T, D): one (b, h) slice at a time through the head kernels
// of ops/cpu/attention_head.h (sgemm products with fixed blocking, a masked row softmax in f32, the
// backward rebuilding P from the log-sum-exp).
#include "ops/cpu/attention_head.h"

#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "ops/cpu/f32_out.h"
#include "ops/cpu/sgemm.h"

namespace st::ops::cpu {
namespace {
// S (T, T) = Q (T, D) · K (T, D)ᵀ · scale, the full product; callers apply the causal mask row by row.
void scores(const float* Q, const float* K, int64_t T, int64_t D, float scale, float* S) {
  sgemm(Q, false, K, true, S, T, T, D);
  for (int64_t i = 0; i < T * T; ++i) S[i] *= scale;
}
}  // namespace

void attention_head_fwd(const float* Q, const float* K, const float* V, int64_t T, int64_t D, float* S, float* O,
                        float* lse) {
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  scores(Q, K, T, D, scale, S);
  for (int64_t t = 0; t < T; ++t) {
    float* St = S + t * T;
    float mx = -INFINITY;
    for (int64_t s = 0; s <= t; ++s) mx = std::max(mx, St[s]);
    double sum = 0;
    for (int64_t s = 0; s <= t; ++s) {
      St[s] = exp_f32(St[s] - mx);
      sum += St[s];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t s = 0; s <= t; ++s) St[s] *= inv;
    for (int64_t s = t + 1; s < T; ++s) St[s] = 0.f;
    lse[t] = mx + static_cast<float>(log_f64(sum));
  }
  sgemm(S, false, V, false, O, T, D, T);  // O (T, D) = P·V
}

void attention_head_bwd(const float* Q, const float* K, const float* V, const float* dO, const float* lse, int64_t T,
                        int64_t D, float* P, float* dP, float* dQ, float* dK, float* dV, bool accumulate_kv) {
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  scores(Q, K, T, D, scale, P);
  for (int64_t t = 0; t < T; ++t) {
    float* Pt = P + t * T;
    const float l = lse[t];
    for (int64_t s = 0; s <= t; ++s) Pt[s] = exp_f32(Pt[s] - l);
    for (int64_t s = t + 1; s < T; ++s) Pt[s] = 0.f;
  }
  sgemm(P, true, dO, false, dV, T, D, T, accumulate_kv);  // dV (T, D) (+)= Pᵀ·dO
  sgemm(dO, false, V, true, dP, T, T, D);                 // dP (T, T) = dO·Vᵀ
  for (int64_t t = 0; t < T; ++t) {
    const float* Pt = P + t * T;
    float* dPt = dP + t * T;
    double dsum = 0;  // rowsum(P ∘ dP)
    for (int64_t s = 0; s <= t; ++s) dsum += static_cast<double>(Pt[s]) * dPt[s];
    const float fd = static_cast<float>(dsum);
    for (int64_t s = 0; s <= t; ++s) dPt[s] = Pt[s] * (dPt[s] - fd) * scale;  // dS·scale
    for (int64_t s = t + 1; s < T; ++s) dPt[s] = 0.f;
  }
  sgemm(dP, false, K, false, dQ, T, D, T);                // dQ (T, D) = dS·K
  sgemm(dP, true, Q, false, dK, T, D, T, accumulate_kv);  // dK (T, D) (+)= dSᵀ·Q
}

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v);
  F32Out o(out);
  const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
  std::vector<float> S(static_cast<size_t>(T * T));  // (T, T)
  for (int64_t i = 0; i < BH; ++i) {
    const int64_t off = i * T * D;
    attention_head_fwd(q32.data<float>() + off, k32.data<float>() + off, v32.data<float>() + off, T, D, S.data(),
                       o.data() + off, lse.data<float>() + i * T);
  }
  o.store();
}

void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  (void)out;  // rowsum(P ∘ dP) is formed from the rebuilt P
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v), g32 = as_f32(dout);
  F32Out odq(dq), odk(dk), odv(dv);
  const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
  std::vector<float> P(static_cast<size_t>(T * T)), dP(static_cast<size_t>(T * T));  // (T, T) each
  for (int64_t i = 0; i < BH; ++i) {
    const int64_t off = i * T * D;
    attention_head_bwd(q32.data<float>() + off, k32.data<float>() + off, v32.data<float>() + off,
                       g32.data<float>() + off, lse.data<float>() + i * T, T, D, P.data(), dP.data(), odq.data() + off,
                       odk.data() + off, odv.data() + off, false);
  }
  odq.store();
  odk.store();
  odv.store();
}

}  // namespace st::ops::cpu
