// ops/rope.h: the inverse frequencies in closed form and against powl, the llama3 adjustment
// against HF's formula worked in double, the cos/sin tables against long double and their bits
// recorded where the test was written (they use no libm: any x86-64 machine must give them), and
// apply_rope in closed form (unit vectors turn by the table's angles) and as a rotation (norms kept,
// the backward is the transpose).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>

#include "ops/rope.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"

using namespace st;

namespace {

int64_t ulps(float a, float b) {
  if (a == b) return 0;
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

ops::RopeConfig llama31(int64_t D) {  // Llama 3.1 8B: θ 500000, llama3 scaling with the defaults
  ops::RopeConfig c;
  c.theta = 500000.0;
  c.head_dim = D;
  c.llama3 = true;
  return c;
}

}  // namespace

// θ 10000, D 8: θ^(2i/D) = 1, 10, 100, 1000 exactly, so inv_freq is the f32 reciprocal of each.
TEST(Rope, DefaultInvFreqClosedForm) {
  const std::vector<float> inv = ops::rope_default_inv_freq(10000.0, 8);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_EQ(inv[1], 1.0f / 10.0f);
  EXPECT_EQ(inv[2], 1.0f / 100.0f);
  EXPECT_EQ(inv[3], 1.0f / 1000.0f);
  // θ 500000, D 128: rd(1 / rd(θ^e)) with e = rd(2i / D) (exact here), against powl
  const std::vector<float> big = ops::rope_default_inv_freq(500000.0, 128);
  for (size_t i = 0; i < big.size(); ++i) {
    const long double p = std::pow(500000.0L, static_cast<long double>(2 * i) / 128.0L);
    EXPECT_EQ(big[i], 1.0f / static_cast<float>(p)) << i;
  }
  EXPECT_THROW(ops::rope_default_inv_freq(10000.0, 7), ValueError);
  EXPECT_THROW(ops::rope_default_inv_freq(0.0, 8), ValueError);
}

// HF's _compute_llama3_parameters in double on the same input frequencies: wavelengths below
// original/high kept (the same float), above original/low divided by the factor (exact: 8 is a
// power of two), between them interpolated; our f32 evaluation is ~6 roundings of 2⁻²⁴ each
// (≤ 4e-7 relative) and no cancellation (both terms of the interpolation are positive), so 1e-6.
TEST(Rope, Llama3ScalingAgainstHfFormulaInDouble) {
  const ops::RopeConfig c = llama31(128);
  const std::vector<float> inv = ops::rope_default_inv_freq(c.theta, c.head_dim);
  const std::vector<float> got = ops::rope_inv_freq(c);
  ASSERT_EQ(got.size(), inv.size());
  const ops::RopeScaling& s = c.scaling;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wl = old_len / s.low_freq_factor, high_wl = old_len / s.high_freq_factor;
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double f = inv[i], wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < high_wl) {
      want = f;
      ++kept;
      EXPECT_EQ(got[i], inv[i]) << i;
    } else if (wavelen > low_wl) {
      want = f / s.factor;
      ++divided;
      EXPECT_EQ(got[i], inv[i] / 8.0f) << i;
    } else {
      const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      want = (1 - smooth) * f / s.factor + smooth * f;
      ++smoothed;
    }
    EXPECT_NEAR(got[i], want, 1e-6 * want) << i;
  }
  // every branch is exercised (θ 500000, D 128: 2π/inv_freq spans 6.3 … 2.9e6)
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  ops::RopeScaling bad;
  bad.high_freq_factor = bad.low_freq_factor;
  EXPECT_THROW(ops::rope_llama3_inv_freq(inv, bad), ValueError);
}

// Every table entry is cos / sin of the f32 angle rd(inv_freq[i]·p), the nearest float of the
// long double value (see tests/ops/test_elementary.cpp for the sin/cos bound).
TEST(Rope, TablesAreTheNearestFloatOfTheAngles) {
  const ops::RopeTable table(llama31(64), 3000);
  const std::vector<float> c = table.cos().to_float(), s = table.sin().to_float();
  ASSERT_EQ(table.cos().shape(), (Shape{3000, 32}));
  int64_t worst = 0;
  for (int64_t p = 0; p < 3000; ++p)
    for (int64_t i = 0; i < 32; ++i) {
      const float angle = table.inv_freq()[static_cast<size_t>(i)] * static_cast<float>(p);
      worst = std::max(worst, ulps(c[p * 32 + i], static_cast<float>(std::cos(static_cast<long double>(angle)))));
      worst = std::max(worst, ulps(s[p * 32 + i], static_cast<float>(std::sin(static_cast<long double>(angle)))));
    }
  EXPECT_EQ(worst, 0);
  EXPECT_THROW(ops::RopeTable(llama31(64), 0), ValueError);
}

// The bits of a Llama 3.1 table (D 128, 8192 positions), recorded on the machine that wrote the
// test: computed without libm, so every x86-64 machine and glibc must give them.
TEST(Rope, TableRecordedBits) {
  const ops::RopeTable table(llama31(128), 8192);
  uint64_t h = 1469598103934665603ULL;
  for (const Tensor& t : {table.cos(), table.sin()})
    for (float f : t.to_float()) {
      uint32_t b;
      std::memcpy(&b, &f, sizeof b);
      for (int i = 0; i < 4; ++i) h = (h ^ ((b >> (8 * i)) & 0xff)) * 1099511628211ULL;
    }
  EXPECT_EQ(h, 0x8900f91a67cd3dfdULL) << std::hex << "got 0x" << h;
}

// Unit vectors e_i (i < D/2) turn in the plane (i, i + D/2) by the angle of (p, i): row p of
// x = e_i becomes cos at i and sin at i + D/2; θ 100, D 4: angles p and rd(0.1f·p).
TEST(Rope, ApplyRopeClosedForm) {
  ops::RopeConfig cfg;
  cfg.theta = 100.0;
  cfg.head_dim = 4;
  const ops::RopeTable table(cfg, 64);
  const int64_t T = 50;
  std::vector<float> x(static_cast<size_t>(T * 2 * 4), 0.f);  // (1, T, 2, 4): head 0 = e_0, head 1 = e_1
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    x[t * 8 + 0] = 1.f;
    x[t * 8 + 4 + 1] = 1.f;
    pos[t] = t + 7;
  }
  const std::vector<float> y =
      ops::apply_rope(Tensor::from_vector(x, {1, T, 2, 4}), table, Tensor::from_vector(pos, {1, T})).to_float();
  for (int64_t t = 0; t < T; ++t) {
    const double p = static_cast<double>(t + 7), a1 = static_cast<float>(0.1f * static_cast<float>(t + 7));
    const double want[8] = {std::cos(p), 0, std::sin(p), 0, 0, std::cos(a1), 0, std::sin(a1)};
    for (int d = 0; d < 8; ++d) EXPECT_NEAR(y[t * 8 + d], want[d], 6e-8) << "t " << t << " d " << d;
  }
  EXPECT_THROW(ops::apply_rope(Tensor::zeros({1, 2, 1, 4}), table, Tensor::from_vector(std::vector<int64_t>{0, 64}, {1, 2})),
               ValueError);  // position 64 outside the table
  EXPECT_THROW(ops::apply_rope(Tensor::zeros({1, 2, 1, 6}), table, Tensor::zeros({1, 2}, DType::i64)), ShapeError);
}

// A rotation: norms kept per (row, head) to f32 roundoff, and the backward is its transpose, so
// ⟨R·x, u⟩ = ⟨x, Rᵀ·u⟩ (the gradient of Σ u ∘ R·x) up to roundoff.
TEST(Rope, ApplyRopeIsARotationWithTransposeBackward) {
  const ops::RopeTable table(llama31(16), 200);
  Generator gen(3);
  Tensor x = Tensor::empty({2, 9, 3, 16});
  fill_normal(x, gen, 0.f, 1.f);
  Tensor u = Tensor::empty({2, 9, 3, 16});
  fill_normal(u, gen, 0.f, 1.f);
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < 18; ++i) pos.push_back(i * 11);
  x.requires_grad_();
  Tensor y = ops::apply_rope(x, table, Tensor::from_vector(pos, {2, 9}));
  y.backward(u);
  const std::vector<float> xv = x.to_float(), yv = y.to_float(), uv = u.to_float(), gv = x.grad().to_float();
  double yu = 0, xg = 0;
  for (size_t r = 0; r < xv.size() / 16; ++r) {
    double nx = 0, ny = 0;
    for (size_t d = 0; d < 16; ++d) {
      nx += double(xv[r * 16 + d]) * xv[r * 16 + d];
      ny += double(yv[r * 16 + d]) * yv[r * 16 + d];
    }
    EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), 1e-6 * std::sqrt(nx)) << "row " << r;
  }
  for (size_t i = 0; i < xv.size(); ++i) {
    yu += double(yv[i]) * uv[i];
    xg += double(xv[i]) * gv[i];
  }
  EXPECT_NEAR(yu, xg, 1e-5 * std::fabs(yu) + 1e-5);
}
