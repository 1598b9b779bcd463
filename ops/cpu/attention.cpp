// CPU causal attention, one (b, h) slice at a time: S = Q·Kᵀ/√D (T, T) by Eigen, a masked
// row softmax in f32 (its log-sum-exp saved), O = P·V. The backward rebuilds P from lse.
#include <Eigen/Core>
#include <cmath>

#include "ops/attention.h"
#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"

namespace st::ops::cpu {
namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

// S (T, T) = Q·Kᵀ·scale, the full product; callers apply the causal mask row by row.
void scores(const ConstMap& Q, const ConstMap& K, float scale, RowMat& S) {
  S.noalias() = Q * K.transpose();
  S *= scale;
}
}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v);
  F32Out o(out);
  const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  RowMat S(T, T);
  float* pl = lse.data<float>();
  for (int64_t i = 0; i < BH; ++i) {
    const int64_t off = i * T * D;
    ConstMap Q(q32.data<float>() + off, T, D), K(k32.data<float>() + off, T, D), V(v32.data<float>() + off, T, D);
    Map O(o.data() + off, T, D);
    scores(Q, K, scale, S);
    for (int64_t t = 0; t < T; ++t) {
      float mx = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) mx = std::max(mx, S(t, s));
      double sum = 0;
      for (int64_t s = 0; s <= t; ++s) {
        S(t, s) = std::exp(S(t, s) - mx);
        sum += S(t, s);
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t s = 0; s <= t; ++s) S(t, s) *= inv;
      for (int64_t s = t + 1; s < T; ++s) S(t, s) = 0.f;
      pl[i * T + t] = mx + static_cast<float>(std::log(sum));
    }
    O.noalias() = S * V;
  }
  o.store();
}

void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v), g32 = as_f32(dout);
  F32Out odq(dq), odk(dk), odv(dv);
  const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const float* pl = lse.data<float>();
  RowMat P(T, T), dP(T, T);
  for (int64_t i = 0; i < BH; ++i) {
    const int64_t off = i * T * D;
    ConstMap Q(q32.data<float>() + off, T, D), K(k32.data<float>() + off, T, D), V(v32.data<float>() + off, T, D);
    ConstMap dO(g32.data<float>() + off, T, D);
    Map dQ(odq.data() + off, T, D), dK(odk.data() + off, T, D), dV(odv.data() + off, T, D);
    scores(Q, K, scale, P);
    for (int64_t t = 0; t < T; ++t) {
      const float l = pl[i * T + t];
      for (int64_t s = 0; s <= t; ++s) P(t, s) = std::exp(P(t, s) - l);
      for (int64_t s = t + 1; s < T; ++s) P(t, s) = 0.f;
    }
    dV.noalias() = P.transpose() * dO;  // (T, D)
    dP.noalias() = dO * V.transpose();  // (T, T)
    for (int64_t t = 0; t < T; ++t) {
      double dsum = 0;  // rowsum(P ∘ dP)
      for (int64_t s = 0; s <= t; ++s) dsum += static_cast<double>(P(t, s)) * dP(t, s);
      const float fd = static_cast<float>(dsum);
      for (int64_t s = 0; s <= t; ++s) dP(t, s) = P(t, s) * (dP(t, s) - fd) * scale;  // dS·scale
      for (int64_t s = t + 1; s < T; ++s) dP(t, s) = 0.f;
    }
    dQ.noalias() = dP * K;              // (T, D)
    dK.noalias() = dP.transpose() * Q;  // (T, D)
  }
  odq.store();
  odk.store();
  odv.store();
}

}  // namespace st::ops::cpu
