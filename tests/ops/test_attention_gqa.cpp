// Grouped-query causal attention with rotary embedding on the packed projection
// (ops::causal_attention_qkv(qkv, H, Hkv, rope, offset), CPU):
//   - against a naive double reference (GQA head mapping, HF's rope in double), with the backward
//     by finite differences of the reference and f16 / bf16 (the op harness);
//   - Hkv = H without rope: the bits of today's causal_attention_qkv(qkv, H) (split heads → 4-d op →
//     join), forward and dqkv, in f32 / f16 / bf16;
//   - the fused rotation is HF's expression: equal bits to apply_rope (tensor ops) on q and k
//     followed by the op without rope (forward in every dtype, and dqkv in f32);
//   - only relative positions matter: shifting every position leaves the output (to roundoff);
//   - bad shapes, heads and positions are typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ops/attention.h"
#include "ops/rope.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/ops/harness.h"

using namespace st;
using namespace st::test;

namespace {

struct Heads {
  int64_t B, T, H, Hkv, D;
  int64_t W() const { return (H + 2 * Hkv) * D; }
};

// qkv (B, T, (H + 2Hkv)·D) → (B, T, H·D) in double: query head h reads key/value head h / (H/Hkv);
// with a table, q and k of row t turn by the angles rd(inv_freq[i]·p) (f32, as HF), p = offset + t,
// the rotation itself in double (q·cos + rotate_half(q)·sin).
std::vector<double> reference(const std::vector<double>& x, const Heads& s, const ops::RopeTable* rope, int64_t offset) {
  const int64_t W = s.W(), D = s.D, half = D / 2, rep = s.H / s.Hkv;
  auto head = [&](int64_t b, int64_t t, int64_t col) {  // the D values at column col of row (b, t), roped if asked
    std::vector<double> v(x.begin() + (b * s.T + t) * W + col, x.begin() + (b * s.T + t) * W + col + D);
    if (!rope || col >= (s.H + s.Hkv) * D) return v;  // v heads are not roped
    std::vector<double> r(static_cast<size_t>(D));
    for (int64_t i = 0; i < half; ++i) {
      const double a = rope->inv_freq()[static_cast<size_t>(i)] * static_cast<float>(offset + t);
      const double c = std::cos(a), sn = std::sin(a);
      r[i] = v[i] * c - v[i + half] * sn;
      r[i + half] = v[i + half] * c + v[i] * sn;
    }
    return r;
  };
  std::vector<double> y(static_cast<size_t>(s.B * s.T * s.H * D), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / rep, kc = (s.H + g) * D, vc = (s.H + s.Hkv + g) * D;
      for (int64_t t = 0; t < s.T; ++t) {
        const std::vector<double> q = head(b, t, h * D);
        std::vector<double> w(static_cast<size_t>(t + 1));
        double mx = -1e300, z = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const std::vector<double> k = head(b, u, kc);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
          w[u] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, w[u]);
        }
        for (auto& v : w) z += (v = std::exp(v - mx));
        for (int64_t u = 0; u <= t; ++u) {
          const std::vector<double> v = head(b, u, vc);
          for (int64_t d = 0; d < D; ++d) y[((b * s.T + t) * s.H + h) * D + d] += w[u] / z * v[d];
        }
      }
    }
  return y;
}

OpCase gqa_case(const std::string& name, Heads s, const ops::RopeTable* rope, int64_t offset) {
  return {.name = name,
          .shapes = {{s.B, s.T, s.W()}},
          .op = [s, rope, offset](auto& x) { return ops::causal_attention_qkv(x[0], s.H, s.Hkv, rope, offset); },
          .ref = [s, rope, offset](auto& x) { return reference(x[0], s, rope, offset); },
          .lo = -2.f,
          .hi = 2.f};
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> f = t.to_float();
  std::vector<uint32_t> b(f.size());
  std::memcpy(b.data(), f.data(), f.size() * sizeof(float));
  return b;
}

Tensor normal(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(s);
  fill_normal(t, gen, 0.f, 1.f);
  return t;
}

ops::RopeConfig rope_config(double theta, int64_t D, bool llama3) {
  ops::RopeConfig c;
  c.theta = theta;
  c.head_dim = D;
  c.llama3 = llama3;
  c.scaling.original_max_position_embeddings = 16;  // so that the small positions here reach every band
  return c;
}

}  // namespace

TEST(OpsAttentionGqa, AgainstDoubleReference) {
  const ops::RopeTable r4(rope_config(100.0, 4, false), 64), r6(rope_config(10000.0, 6, true), 64);
  const ops::RopeTable r8(rope_config(500000.0, 8, true), 64);
  check_op(gqa_case("gqa H 4 Hkv 2 D 4, rope θ 100, offset 3", {2, 6, 4, 2, 4}, &r4, 3));
  check_op(gqa_case("mqa H 3 Hkv 1 D 6, rope llama3, offset 0", {1, 7, 3, 1, 6}, &r6, 0));
  check_op(gqa_case("mha H 2 Hkv 2 D 8, rope llama3 θ 5e5, offset 40", {1, 5, 2, 2, 8}, &r8, 40));
  check_op(gqa_case("gqa H 6 Hkv 3 D 3, no rope", {2, 5, 6, 3, 3}, nullptr, 0));
}

// Hkv = H, no rope: the grouped-query kernel (ops/cpu/attention_qkv.cpp) gives the bits of the
// GPT's path (split heads → causal_attention → join, the autograd of the views assembling dqkv).
TEST(OpsAttentionGqa, MultiHeadWithoutRopeIsBitIdenticalToTheGptPath) {
  const int64_t B = 2, T = 37, H = 3, D = 8;
  const Tensor x0 = normal({B, T, 3 * H * D}, 5), g0 = normal({B, T, H * D}, 6);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor a = x0.to(dt).clone().requires_grad_(), b = x0.to(dt).clone().requires_grad_();
    Tensor ya = ops::causal_attention_qkv(a, H), yb = ops::causal_attention_qkv(b, H, H);
    ya.backward(g0.to(dt));
    yb.backward(g0.to(dt));
    EXPECT_EQ(bits(ya), bits(yb)) << dtype_name(dt) << " forward";
    EXPECT_EQ(bits(a.grad()), bits(b.grad())) << dtype_name(dt) << " dqkv";
  }
}

// The fused rotation against apply_rope (HF's expression as tensor ops) on q and k, then the op
// without rope: the roped operands are the same bits, so is the attention on them; dqkv the same
// values in f32 (the rotation back is c·dy + s·dy' either way; in f16 / bf16 autograd rounds its
// products, the fused kernel does not).
TEST(OpsAttentionGqa, FusedRopeEqualsApplyRopeThenAttention) {
  const Heads s{2, 11, 4, 2, 8};
  const ops::RopeTable table(rope_config(10000.0, s.D, true), 32);
  const int64_t offset = 5;
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t) pos.push_back(offset + t);
  const Tensor positions = Tensor::from_vector(pos, {s.B, s.T});
  const Tensor x0 = normal({s.B, s.T, s.W()}, 8), g0 = normal({s.B, s.T, s.H * s.D}, 9);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor a = x0.to(dt).clone().requires_grad_(), b = x0.to(dt).clone().requires_grad_();
    Tensor ya = ops::causal_attention_qkv(a, s.H, s.Hkv, &table, offset);
    auto roped = [&](int64_t col, int64_t n) {  // (B, T, n·D) piece of b, roped
      return ops::apply_rope(b.narrow(2, col, n * s.D).reshape({s.B, s.T, n, s.D}), table, positions)
          .reshape({s.B, s.T, n * s.D});
    };
    Tensor xb = Tensor::cat({roped(0, s.H), roped(s.H * s.D, s.Hkv), b.narrow(2, (s.H + s.Hkv) * s.D, s.Hkv * s.D)}, 2);
    Tensor yb = ops::causal_attention_qkv(xb, s.H, s.Hkv);
    EXPECT_EQ(bits(ya), bits(yb)) << dtype_name(dt) << " forward";
    ya.backward(g0.to(dt));
    yb.backward(g0.to(dt));
    if (dt == DType::f32) {  // equal floats: a zero may differ in sign (autograd adds the views' zero padding)
      EXPECT_EQ(a.grad().to_float(), b.grad().to_float()) << "dqkv";
    }
  }
}

// q·k after rotation depends on t − s only, so moving every position by 200 changes the output by
// roundoff alone: the angles are f32 products rd(inv_freq·p) (≤ 2⁻²⁴·200·|inv| apart from the
// exact ones) and cos/sin are rounded to f32, ~1e-6 on scores of size ~1; 1e-5 is above that and
// far below what one wrong position does (~1e-1 with these frequencies).
TEST(OpsAttentionGqa, OnlyRelativePositionsMatter) {
  const Heads s{1, 16, 4, 1, 8};
  const ops::RopeTable table(rope_config(100.0, s.D, false), 256);
  const Tensor x = normal({s.B, s.T, s.W()}, 10);
  const std::vector<float> y0 = ops::causal_attention_qkv(x, s.H, s.Hkv, &table, 0).to_float();
  const std::vector<float> y1 = ops::causal_attention_qkv(x, s.H, s.Hkv, &table, 200).to_float();
  const std::vector<float> yn = ops::causal_attention_qkv(x, s.H, s.Hkv).to_float();  // no rope
  double d01 = 0, dn = 0;
  for (size_t i = 0; i < y0.size(); ++i) {
    d01 = std::max(d01, std::fabs(double(y0[i]) - y1[i]));
    dn = std::max(dn, std::fabs(double(y0[i]) - yn[i]));
  }
  EXPECT_LT(d01, 1e-5);
  EXPECT_GT(dn, 1e-2) << "the rotation must change the scores (a rope that ignores positions is the identity)";
}

TEST(OpsAttentionGqa, BadCallsAreTypedErrors) {
  const ops::RopeTable table(rope_config(100.0, 4, false), 8);
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 32}), 3, 2), ShapeError);   // 2 does not divide 3
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 30}), 4, 2), ShapeError);   // 30 ≠ (4 + 4)·D
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 32}), 4, 0), ShapeError);
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 48}), 4, 2, &table), ShapeError);  // D 6 ≠ 4
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 32}), 4, 2, &table, 7), ValueError);  // 7 + 2 > 8
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 32}, DType::i64), 4, 2), DTypeError);
  EXPECT_NO_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 32}), 4, 2, &table, 6));
}
