// CPU block attention (ops/block_attention.h): one (b, h) slice at a time, rectangular
// Tq × Tk score blocks by sgemm (ops/cpu/sgemm.h), the row softmax in f32 with a double row sum
// and exp/log from ops/cpu_math/elementary.h (the same expressions as ops/cpu/attention.cpp's
// head kernels, so a causal block over the whole sequence gives their forward bits). The
// backward sums dK, dV of a key/value group over its query heads in head order (sgemm
// accumulation) and adds dQ into the caller's f32 accumulator.
#include "ops/block_attention.h"

#include <cmath>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/cpu/sgemm.h"
#include "ops/cpu_math/elementary.h"

namespace st::ops::cpu {
namespace {

struct Dims {
  int64_t B, H, Hkv, Tq, Tk, D;
  int64_t rep() const { return H / Hkv; }
  // element offsets of the (b, h) query slice and the (b, g) key/value slice
  int64_t q_off(int64_t b, int64_t h) const { return (b * H + h) * Tq * D; }
  int64_t k_off(int64_t b, int64_t g) const { return (b * Hkv + g) * Tk * D; }
};

Dims dims_of(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
}

// keys visible to query row i of the block
int64_t visible(BlockMask mask, int64_t i, int64_t Tk) { return mask == BlockMask::causal ? i + 1 : Tk; }

// S (Tq, Tk) = Q (Tq, D) · K (Tk, D)ᵀ · scale
void scores(const float* Q, const float* K, const Dims& d, float scale, float* S) {
  sgemm(Q, false, K, true, S, d.Tq, d.Tk, d.D);
  for (int64_t i = 0; i < d.Tq * d.Tk; ++i) S[i] *= scale;
}

}  // namespace

void block_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, BlockMask mask, Tensor& out, Tensor& lse) {
  const Dims d = dims_of(q, k);
  const float scale = 1.f / std::sqrt(static_cast<float>(d.D));
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v);
  F32Out o(out);                                           // (B, H, Tq, D)
  float* L = lse.data<float>();                            // (B, H, Tq)
  std::vector<float> S(static_cast<size_t>(d.Tq * d.Tk));  // (Tq, Tk)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / d.rep();
      scores(q32.data<float>() + d.q_off(b, h), k32.data<float>() + d.k_off(b, g), d, scale, S.data());
      for (int64_t i = 0; i < d.Tq; ++i) {
        float* Si = S.data() + i * d.Tk;
        const int64_t n = visible(mask, i, d.Tk);
        float mx = -INFINITY;
        for (int64_t s = 0; s < n; ++s) mx = std::max(mx, Si[s]);
        double sum = 0;
        for (int64_t s = 0; s < n; ++s) {
          Si[s] = exp_f32(Si[s] - mx);
          sum += Si[s];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t s = 0; s < n; ++s) Si[s] *= inv;
        for (int64_t s = n; s < d.Tk; ++s) Si[s] = 0.f;
        L[(b * d.H + h) * d.Tq + i] = mx + static_cast<float>(log_f64(sum));
      }
      // O (Tq, D) = P (Tq, Tk) · V (Tk, D)
      sgemm(S.data(), false, v32.data<float>() + d.k_off(b, g), false, o.data() + d.q_off(b, h), d.Tq, d.D, d.Tk);
    }
  o.store();
}

void attention_delta(const Tensor& out, const Tensor& dout, Tensor& delta) {
  Tensor o32 = as_f32(out), g32 = as_f32(dout);  // (B, H, T, D)
  const int64_t rows = out.numel() / out.size(-1), D = out.size(-1);
  const float *o = o32.data<float>(), *g = g32.data<float>();
  float* dl = delta.data<float>();  // (B, H, T)
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;  // in order over d
    for (int64_t c = 0; c < D; ++c) s += static_cast<double>(o[r * D + c]) * g[r * D + c];
    dl[r] = static_cast<float>(s);
  }
}

void block_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, BlockMask mask, Tensor& dq, Tensor& dk, Tensor& dv) {
  const Dims d = dims_of(q, k);
  const float scale = 1.f / std::sqrt(static_cast<float>(d.D));
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v), g32 = as_f32(dout);
  F32Out odk(dk), odv(dv);                                               // (B, Hkv, Tk, D), written =
  float* DQ = dq.data<float>();                                          // (B, H, Tq, D), +=
  const float *L = lse.data<float>(), *DL = delta.data<float>();         // (B, H, Tq)
  std::vector<float> P(static_cast<size_t>(d.Tq * d.Tk)), dP(P.size());  // (Tq, Tk) each
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t g = 0; g < d.Hkv; ++g) {
      const float *K = k32.data<float>() + d.k_off(b, g), *V = v32.data<float>() + d.k_off(b, g);
      float *dK = odk.data() + d.k_off(b, g), *dV = odv.data() + d.k_off(b, g);
      for (int64_t j = 0; j < d.rep(); ++j) {  // the group's query heads, in order
        const int64_t h = g * d.rep() + j;
        const float *Q = q32.data<float>() + d.q_off(b, h), *dO = g32.data<float>() + d.q_off(b, h);
        const float *l = L + (b * d.H + h) * d.Tq, *dl = DL + (b * d.H + h) * d.Tq;
        scores(Q, K, d, scale, P.data());
        for (int64_t i = 0; i < d.Tq; ++i) {  // P = exp(S − lse_global), masked
          float* Pi = P.data() + i * d.Tk;
          const int64_t n = visible(mask, i, d.Tk);
          for (int64_t s = 0; s < n; ++s) Pi[s] = exp_f32(Pi[s] - l[i]);
          for (int64_t s = n; s < d.Tk; ++s) Pi[s] = 0.f;
        }
        sgemm(P.data(), true, dO, false, dV, d.Tk, d.D, d.Tq, j > 0);  // dV (Tk, D) (+)= Pᵀ·dO
        sgemm(dO, false, V, true, dP.data(), d.Tq, d.Tk, d.D);         // dP (Tq, Tk) = dO·Vᵀ
        for (int64_t i = 0; i < d.Tq; ++i) {                           // dS·scale = P ∘ (dP − Δ)·scale
          const float* Pi = P.data() + i * d.Tk;
          float* dPi = dP.data() + i * d.Tk;
          for (int64_t s = 0; s < d.Tk; ++s) dPi[s] = Pi[s] * (dPi[s] - dl[i]) * scale;
        }
        sgemm(dP.data(), false, K, false, DQ + d.q_off(b, h), d.Tq, d.D, d.Tk, true);  // dQ (Tq, D) += dS·K
        sgemm(dP.data(), true, Q, false, dK, d.Tk, d.D, d.Tq, j > 0);                  // dK (Tk, D) (+)= dSᵀ·Q
      }
    }
  odk.store();
  odv.store();
}

}  // namespace st::ops::cpu
