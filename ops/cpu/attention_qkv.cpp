// CPU grouped-query causal attention on the packed projection, with rotary embedding (ops/attention.h,
// ops/rope.h). Per batch row b: the Hkv key heads are gathered from qkv into f32 (T, D) matrices and
// roped once, the value heads gathered; then each query head is gathered (and roped) and runs the
// head kernels of the 4-d op (ops/cpu/attention_head.h) against its group's keys and values. The
// backward sums dK, dV of a group over its query heads in head order (sgemm accumulation) and
// rotates dQ and dK back before they are stored. Every output is rounded once into its dtype.
//   qkv (B, T, W), W = (H + 2·Hkv)·D: row (b, t) holds q head h at [h·D, (h + 1)·D), k head g at
//   (H + g)·D and v head g at (H + Hkv + g)·D.
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/attention_head.h"
#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"

namespace st::ops::cpu {
namespace {

// v rounded to dt, as f32 (HF computes the rotation in q's dtype; ops/rope.h)
float round_to(DType dt, float v) {
  if (dt == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (dt == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
}

struct Layout {
  int64_t B, T, H, Hkv, D, W;
  int64_t rep() const { return H / Hkv; }
  int64_t q_col(int64_t h) const { return h * D; }
  int64_t k_col(int64_t g) const { return (H + g) * D; }
  int64_t v_col(int64_t g) const { return (H + Hkv + g) * D; }
};

// The rotation of row t's head (position offset + t), or none.
struct Rotation {
  const float *cos = nullptr, *sin = nullptr;  // (P, D/2) host tables
  int64_t offset = 0;
  DType dt = DType::f32;

  // y (D) = the rope of x (D) at position p: ops/rope.h's expression, rounded as HF does in dt
  void apply(const float* x, float* y, int64_t D, int64_t p) const {
    const int64_t half = D / 2;
    const float *cr = cos + p * half, *sr = sin + p * half;
    for (int64_t i = 0; i < half; ++i) {
      const float c = round_to(dt, cr[i]), s = round_to(dt, sr[i]), lo = x[i], hi = x[i + half];
      y[i] = round_to(dt, round_to(dt, lo * c) - round_to(dt, hi * s));
      y[i + half] = round_to(dt, round_to(dt, hi * c) + round_to(dt, lo * s));
    }
  }
  // dx (D) = Rᵀ·dy (D) at position p, in f32 with the same (dt-rounded) c, s
  void undo(const float* dy, float* dx, int64_t D, int64_t p) const {
    const int64_t half = D / 2;
    const float *cr = cos + p * half, *sr = sin + p * half;
    for (int64_t i = 0; i < half; ++i) {
      const float c = round_to(dt, cr[i]), s = round_to(dt, sr[i]), lo = dy[i], hi = dy[i + half];
      dx[i] = c * lo + s * hi;
      dx[i + half] = c * hi - s * lo;
    }
  }
};

Rotation rotation_of(const RopeTable* rope, int64_t offset, DType dt) {
  Rotation r;
  if (!rope) return r;
  r.cos = rope->cos().data<float>();
  r.sin = rope->sin().data<float>();
  r.offset = offset;
  r.dt = dt;
  return r;
}

// M (T, D) = the head at column `col` of row b of x (B, T, W) f32, roped when rot.cos is set
void gather(const float* x, const Layout& l, int64_t b, int64_t col, const Rotation& rot, bool roped, float* M) {
  for (int64_t t = 0; t < l.T; ++t) {
    const float* src = x + (b * l.T + t) * l.W + col;
    if (roped && rot.cos)
      rot.apply(src, M + t * l.D, l.D, rot.offset + t);
    else
      for (int64_t d = 0; d < l.D; ++d) M[t * l.D + d] = src[d];
  }
}

// the head at column `col` of row b of y (B, T, W') = M (T, D), rotated back first when rot.cos is set
void scatter(const float* M, const Layout& l, int64_t b, int64_t col, int64_t width, const Rotation& rot, bool roped,
             float* y) {
  for (int64_t t = 0; t < l.T; ++t) {
    float* dst = y + (b * l.T + t) * width + col;
    if (roped && rot.cos)
      rot.undo(M + t * l.D, dst, l.D, rot.offset + t);
    else
      for (int64_t d = 0; d < l.D; ++d) dst[d] = M[t * l.D + d];
  }
}

Layout layout_of(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t W = qkv.size(2);
  return {qkv.size(0), qkv.size(1), heads, kv_heads, W / (heads + 2 * kv_heads), W};
}

}  // namespace

void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads, int64_t kv_heads,
                       const RopeTable* rope, int64_t position_offset) {
  const Layout l = layout_of(qkv, heads, kv_heads);
  const Rotation rot = rotation_of(rope, position_offset, qkv.dtype());
  Tensor x32 = as_f32(qkv);  // (B, T, W)
  const float* x = x32.data<float>();
  F32Out o(out);             // (B, T, H·D)
  const size_t TD = static_cast<size_t>(l.T * l.D);
  std::vector<float> K(static_cast<size_t>(l.Hkv) * TD), V(static_cast<size_t>(l.Hkv) * TD);  // (Hkv, T, D) each
  std::vector<float> Q(TD), O(TD), S(static_cast<size_t>(l.T * l.T));                          // (T, D), (T, D), (T, T)
  for (int64_t b = 0; b < l.B; ++b) {
    for (int64_t g = 0; g < l.Hkv; ++g) {
      gather(x, l, b, l.k_col(g), rot, true, K.data() + g * TD);
      gather(x, l, b, l.v_col(g), rot, false, V.data() + g * TD);
    }
    for (int64_t h = 0; h < l.H; ++h) {
      const int64_t g = h / l.rep();
      gather(x, l, b, l.q_col(h), rot, true, Q.data());
      attention_head_fwd(Q.data(), K.data() + g * TD, V.data() + g * TD, l.T, l.D, S.data(), O.data(),
                         lse.data<float>() + (b * l.H + h) * l.T);
      scatter(O.data(), l, b, h * l.D, l.H * l.D, rot, false, o.data());
    }
  }
  o.store();
}

void attention_qkv_bwd(const Tensor& qkv, const Tensor& lse, const Tensor& dout, Tensor& dqkv, int64_t heads,
                       int64_t kv_heads, const RopeTable* rope, int64_t position_offset) {
  const Layout l = layout_of(qkv, heads, kv_heads);
  const Rotation rot = rotation_of(rope, position_offset, qkv.dtype());
  Tensor x32 = as_f32(qkv), g32 = as_f32(dout);  // (B, T, W), (B, T, H·D)
  const float *x = x32.data<float>(), *gy = g32.data<float>();
  F32Out od(dqkv);                               // (B, T, W)
  const size_t TD = static_cast<size_t>(l.T * l.D), TT = static_cast<size_t>(l.T * l.T);
  const Layout lo{l.B, l.T, l.H, l.H, l.D, l.H * l.D};  // dout's rows: H heads of D
  std::vector<float> K(static_cast<size_t>(l.Hkv) * TD), V(static_cast<size_t>(l.Hkv) * TD);  // (Hkv, T, D) each
  std::vector<float> Q(TD), dO(TD), dQ(TD), dK(TD), dV(TD), P(TT), dP(TT);
  const Rotation none;
  for (int64_t b = 0; b < l.B; ++b) {
    for (int64_t g = 0; g < l.Hkv; ++g) {
      gather(x, l, b, l.k_col(g), rot, true, K.data() + g * TD);
      gather(x, l, b, l.v_col(g), rot, false, V.data() + g * TD);
    }
    for (int64_t g = 0; g < l.Hkv; ++g) {
      for (int64_t j = 0; j < l.rep(); ++j) {  // the group's query heads, in order
        const int64_t h = g * l.rep() + j;
        gather(x, l, b, l.q_col(h), rot, true, Q.data());
        gather(gy, lo, b, h * l.D, none, false, dO.data());
        attention_head_bwd(Q.data(), K.data() + g * TD, V.data() + g * TD, dO.data(),
                           lse.data<float>() + (b * l.H + h) * l.T, l.T, l.D, P.data(), dP.data(), dQ.data(), dK.data(),
                           dV.data(), j > 0);
        scatter(dQ.data(), l, b, l.q_col(h), l.W, rot, true, od.data());
      }
      scatter(dK.data(), l, b, l.k_col(g), l.W, rot, true, od.data());
      scatter(dV.data(), l, b, l.v_col(g), l.W, rot, false, od.data());
    }
  }
  od.store();
}

}  // namespace st::ops::cpu
