// FP8 ops on the CPU (ops/fp8_scaling.h, fp8_quantize.h, fp8_matmul.h, fp8_linear.h) against
// references written here from the definitions: the scaling rule in closed form, the cast as
// tests/support/fp8_reference.h's nearest-even search of x·s, and the products in double.
// (The op harness's finite differences do not apply: a quantized function is piecewise constant,
// and fp8_linear's gradient is by definition the straight-through one checked here in closed form.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/fp8_linear.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "tests/support/fp8_reference.h"
#include "tests/support/fp8_test_util.h"

using namespace st;
using namespace st::ops;
using st::test::normal;
using st::test::Fp8Ref;

namespace {

const Fp8Ref kE4M3(true), kE5M2(false);
const Fp8Ref& ref_of(Fp8Format f) { return f == Fp8Format::e4m3 ? kE4M3 : kE5M2; }

// The rule of ops/fp8_scaling.h in double: fmax / amax rounded to f32 (a double quotient of two
// floats rounded to f32 is the correctly rounded f32 quotient), · 2^-margin, clamped to
// [2^-126, 2^126], floored to a power of two when pow2.
float ref_scale(float amax, float prev, Fp8Format f, int margin, bool pow2) {
  if (!(amax > 0) || !std::isfinite(amax)) return prev;
  double s = static_cast<float>(static_cast<double>(ref_of(f).max()) / amax);
  s = std::ldexp(s, -margin);
  s = std::min(std::max(s, std::ldexp(1.0, -126)), std::ldexp(1.0, 126));
  if (pow2) s = std::ldexp(1.0, std::ilogb(s));
  return static_cast<float>(s);
}

float amax_of(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// the codes of fp8(x · s), x · s in f32
std::vector<uint8_t> ref_codes(const std::vector<float>& x, float s, Fp8Format f) {
  std::vector<uint8_t> out;
  for (float v : x) out.push_back(ref_of(f).encode(v * s));
  return out;
}
std::vector<double> ref_values(const std::vector<uint8_t>& codes, Fp8Format f) {
  std::vector<double> out;
  for (uint8_t c : codes) out.push_back(ref_of(f).decode(c));
  return out;
}
std::vector<uint8_t> bytes(const Tensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.contiguous().data_ptr());
  return std::vector<uint8_t>(p, p + t.numel());
}
float at(const Tensor& t, int64_t i) { return static_cast<float>(t.to_double()[i]); }

// c (M, N) = α · Σ_k a (M, K) · b (N, K) in double, with the bound of an f32 sum of K exact
// products in any order: |error| ≤ α · K · 2^-24 · Σ|a·b| (γ_K), plus the final product by α (2^-24 |c|).
struct RefProduct {
  std::vector<double> c, bound;
};
RefProduct ref_matmul_nt(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t N, int64_t K,
                         float alpha) {
  RefProduct r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += a[m * K + k] * b[n * K + k];
        sa += std::fabs(a[m * K + k] * b[n * K + k]);
      }
      r.c[m * N + n] = alpha * s;
      r.bound[m * N + n] = alpha * (K * std::ldexp(sa, -24)) + std::ldexp(std::fabs(alpha * s), -23);
    }
  return r;
}
std::vector<double> transpose(const std::vector<double>& a, int64_t R, int64_t C) {  // (R, C) → (C, R)
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[c * R + r] = a[r * C + c];
  return t;
}

}  // namespace

TEST(Fp8Scaling, TheRuleInClosedForm) {
  const float prev = 0.5f;
  EXPECT_EQ(fp8_scale_from_amax(448.f, prev, 448.f, 0, true), 1.f);
  EXPECT_EQ(fp8_scale_from_amax(1.f, prev, 448.f, 0, true), 256.f);          // 448 floored to 2^8
  EXPECT_EQ(fp8_scale_from_amax(1.f, prev, 448.f, 0, false), 448.f);
  EXPECT_EQ(fp8_scale_from_amax(3.f, prev, 448.f, 0, false), 448.f / 3.f);   // one rounding
  EXPECT_EQ(fp8_scale_from_amax(1.f, prev, 448.f, 2, false), 112.f);         // margin 2: /4
  EXPECT_EQ(fp8_scale_from_amax(1.f, prev, 57344.f, 1, true), 16384.f);      // 28672 → 2^14
  EXPECT_EQ(fp8_scale_from_amax(0.f, prev, 448.f, 0, true), prev);           // amax 0: keep
  EXPECT_EQ(fp8_scale_from_amax(-0.f, prev, 448.f, 0, true), prev);
  EXPECT_EQ(fp8_scale_from_amax(NAN, prev, 448.f, 0, true), prev);
  EXPECT_EQ(fp8_scale_from_amax(INFINITY, prev, 448.f, 0, true), prev);
  EXPECT_EQ(fp8_scale_from_amax(1e-40f, prev, 448.f, 0, false), std::ldexp(1.f, 126));  // clamped (448/amax = inf)
  EXPECT_EQ(fp8_scale_from_amax(3e38f, prev, 448.f, 20, true), std::ldexp(1.f, -126));  // clamped below
  // amax · s stays within max: pow2 uses (max/2, max]
  for (float a : {0.37f, 1.f, 2.5f, 447.f, 449.f, 1e5f, 3e-3f}) {
    const float s = fp8_scale_from_amax(a, prev, 448.f, 0, true);
    EXPECT_LE(a * s, 448.f) << a;
    EXPECT_GT(a * s, 224.f) << a;
    EXPECT_EQ(s, ref_scale(a, prev, Fp8Format::e4m3, 0, true)) << a;
  }
  EXPECT_THROW(fp8_scaling({.history = 0}), ValueError);
  EXPECT_THROW(fp8_scaling({.margin = -1}), ValueError);
}

TEST(Fp8Quantize, CurrentScalingCastsXTimesSToTheNearestEven) {
  for (Fp8Format fmt : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (bool pow2 : {true, false})
      for (DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(fp8_format_name(fmt)) + (pow2 ? " pow2 " : " exact ") + dtype_name(dt));
        std::vector<float> xv = normal(3 * 5 * 40, 1.f, 7);
        xv[17] = 37.f;  // an outlier
        xv[99] = -1e-6f;
        Tensor x = Tensor::from_vector(xv, {3, 5, 40}, dt);
        xv = x.to_float();  // the values as rounded to dt
        Fp8Scaling sc = fp8_scaling({.format = fmt, .margin = pow2 ? 0 : 1, .pow2 = pow2});
        Fp8Tensor q = fp8_quantize(x, sc, /*transpose=*/true);
        const float amax = amax_of(xv), s = ref_scale(amax, 1.f, fmt, pow2 ? 0 : 1, pow2);
        EXPECT_EQ(at(sc.amax(), 0), amax);
        EXPECT_EQ(at(sc.scale(), 0), s);
        EXPECT_EQ(at(sc.scale_inv(), 0), 1.f / s);
        EXPECT_EQ(at(q.scale_inv, 0), 1.f / s);
        EXPECT_EQ(q.data.dtype(), fp8_dtype(fmt));
        EXPECT_EQ(q.data.shape(), (Shape{3, 5, 40}));
        const std::vector<uint8_t> want = ref_codes(xv, s, fmt), got = bytes(q.data), got_t = bytes(q.data_t);
        EXPECT_EQ(got, want);
        ASSERT_EQ(q.data_t.shape(), (Shape{40, 15}));
        int bad_t = 0;
        for (int64_t r = 0; r < 15; ++r)
          for (int64_t c = 0; c < 40; ++c) bad_t += got_t[c * 15 + r] != got[r * 40 + c];
        EXPECT_EQ(bad_t, 0);
        // dequantize: f32(q) · s⁻¹, exactly (s⁻¹ is exact when pow2; one rounding otherwise)
        const std::vector<double> deq = fp8_dequantize(q).to_double(), vals = ref_values(want, fmt);
        for (size_t i = 0; i < deq.size(); ++i)
          ASSERT_EQ(deq[i], static_cast<double>(static_cast<float>(vals[i]) * (1.f / s))) << i;
        if (pow2) {  // |x − deq| ≤ half an fp8 step of x·s, over s (relative 2^-(m+1) for normals)
          const Fp8Ref& r = ref_of(fmt);
          for (size_t i = 0; i < deq.size(); ++i) {
            const double rel = std::ldexp(static_cast<double>(std::fabs(xv[i])), -r.mant - 1);
            const double sub = std::ldexp(1.0, 1 - r.bias - r.mant - 1) / s;  // half the subnormal step
            EXPECT_LE(std::fabs(deq[i] - xv[i]), std::max(rel, sub)) << i;
          }
        }
      }
}

TEST(Fp8Quantize, ZeroTensorKeepsTheScale) {
  Fp8Scaling sc = fp8_scaling({});
  Fp8Tensor q1 = fp8_quantize(Tensor::from_vector(std::vector<float>{0.5f, -2.f}, {2}), sc);
  EXPECT_EQ(at(sc.scale(), 0), 128.f);  // 448 / 2 = 224 → 128
  Fp8Tensor q0 = fp8_quantize(Tensor::zeros({4, 3}), sc);
  EXPECT_EQ(at(sc.amax(), 0), 0.f);
  EXPECT_EQ(at(sc.scale(), 0), 128.f);  // amax 0: unchanged
  EXPECT_EQ(bytes(q0.data), std::vector<uint8_t>(12, 0));
  for (double v : fp8_dequantize(q0).to_double()) EXPECT_EQ(v, 0.0);
  // a fresh state with a zero tensor: s stays 1
  Fp8Scaling fresh = fp8_scaling({});
  fp8_quantize(Tensor::zeros({5}), fresh);
  EXPECT_EQ(at(fresh.scale(), 0), 1.f);
  EXPECT_EQ(at(fresh.scale_inv(), 0), 1.f);
}

TEST(Fp8Quantize, DelayedScalingUsesTheLastUpdateAndKeepsAHistory) {
  const int margin = 0;
  Fp8Scaling sc = fp8_scaling({.format = Fp8Format::e4m3, .mode = Fp8ScaleMode::delayed, .history = 3});
  ASSERT_EQ(sc.state.numel(), 6);
  // before any update: s = 1; amaxes max-accumulate over casts
  std::vector<float> a{1.5f, -600.f}, b{2.f, 3.f};
  Fp8Tensor qa = fp8_quantize(Tensor::from_vector(a, {2}), sc);
  fp8_quantize(Tensor::from_vector(b, {2}), sc);
  EXPECT_EQ(bytes(qa.data), ref_codes(a, 1.f, Fp8Format::e4m3));  // −600 saturates to −448
  EXPECT_EQ(bytes(qa.data)[1], 0xfe);
  EXPECT_EQ(at(sc.amax(), 0), 600.f);
  EXPECT_EQ(at(qa.scale_inv, 0), 1.f);
  // steps: amax of the step → history (newest first) → s from its max
  const std::vector<float> step_amax{600.f, 2.f, 0.5f, 0.25f, 0.f};
  std::vector<float> hist{0, 0, 0};
  float s = 1.f;
  for (size_t k = 0; k < step_amax.size(); ++k) {
    if (k > 0) fp8_quantize(Tensor::from_vector(std::vector<float>{step_amax[k], -step_amax[k] / 2}, {2}), sc);
    fp8_scaling_update(sc);
    hist = {step_amax[k], hist[0], hist[1]};
    s = ref_scale(std::max({hist[0], hist[1], hist[2]}), s, Fp8Format::e4m3, margin, true);
    SCOPED_TRACE("step " + std::to_string(k));
    EXPECT_EQ(sc.history().to_float(), hist);
    EXPECT_EQ(at(sc.amax(), 0), 0.f);
    EXPECT_EQ(at(sc.scale(), 0), s);
    EXPECT_EQ(at(sc.scale_inv(), 0), 1.f / s);
  }
  EXPECT_EQ(s, 512.f);  // history {0, 0.25, 0.5}: 448 / 0.5 = 896 → 512
  // the next cast multiplies by that s, and its s⁻¹ copy does not follow later updates
  std::vector<float> c{0.3f, -0.01f};
  Fp8Tensor qc = fp8_quantize(Tensor::from_vector(c, {2}), sc);
  EXPECT_EQ(bytes(qc.data), ref_codes(c, 512.f, Fp8Format::e4m3));
  fp8_scaling_update(sc);
  fp8_scaling_update(sc);
  fp8_scaling_update(sc);  // history {0.3, 0, 0.25}, {0, 0.3, 0}, {0, 0, 0.3}
  EXPECT_EQ(at(qc.scale_inv, 0), 1.f / 512.f);
  EXPECT_EQ(at(sc.scale(), 0), 1024.f);  // 448 / 0.3 = 1493 → 1024
  // a non-finite amax is not pushed; one more update drops 0.3 and leaves only zeros: s is kept
  fp8_quantize(Tensor::from_vector(std::vector<float>{1.f, NAN}, {2}), sc);
  EXPECT_TRUE(std::isnan(at(sc.amax(), 0)));
  fp8_scaling_update(sc);
  EXPECT_EQ(sc.history().to_float(), (std::vector<float>{0, 0, 0.3f}));
  EXPECT_EQ(at(sc.amax(), 0), 0.f);
  fp8_scaling_update(sc);
  EXPECT_EQ(sc.history().to_float(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(at(sc.scale(), 0), 1024.f);
}

TEST(Fp8Matmul, EqualsTheScaledProductOfTheDecodedOperands) {
  const int64_t M = 7, N = 9, K = 40;
  for (auto [fa, fb] : {std::pair{Fp8Format::e4m3, Fp8Format::e4m3}, std::pair{Fp8Format::e5m2, Fp8Format::e4m3},
                        std::pair{Fp8Format::e4m3, Fp8Format::e5m2}})
    for (DType out : {DType::f32, DType::bf16})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(out)) + (with_bias ? " + bias" : ""));
        Fp8Scaling sa = fp8_scaling({.format = fa, .pow2 = false}), sb = fp8_scaling({.format = fb});
        std::vector<float> av = normal(M * K, 3.f, 1), bv = normal(N * K, 0.02f, 2);
        Fp8Tensor qa = fp8_quantize(Tensor::from_vector(av, {M, K}), sa);
        Fp8Tensor qb = fp8_quantize(Tensor::from_vector(bv, {N, K}), sb);
        // the bias is taken in the output's dtype (f32 values → bf16 first), then added in f32
        const Tensor bias = with_bias ? Tensor::from_vector(normal(N, 0.5f, 3), {N}) : Tensor();
        const std::vector<double> bias_out = with_bias ? bias.to(out).to_double() : std::vector<double>(N, 0.0);
        Tensor amax = Tensor::zeros({1});
        Tensor c = fp8_matmul(qa.data, qa.scale_inv, qb.data, qb.scale_inv, out, amax, bias);
        ASSERT_EQ(c.shape(), (Shape{M, N}));
        ASSERT_EQ(c.dtype(), out);
        const float alpha = at(qa.scale_inv, 0) * at(qb.scale_inv, 0);
        const RefProduct r = ref_matmul_nt(ref_values(bytes(qa.data), fa), ref_values(bytes(qb.data), fb), M, N, K, alpha);
        const std::vector<double> cv = c.to_double();
        float cmax = 0;
        for (int64_t i = 0; i < M * N; ++i) {
          const double want = r.c[i] + bias_out[static_cast<size_t>(i % N)];
          // the sums' bound; bf16: the one rounding (half an ulp ≤ |c|·2⁻⁸); f32: the bias's add (2⁻²⁴)
          const double tol = r.bound[i] + std::ldexp(std::fabs(want), out == DType::bf16 ? -8 : -23);
          EXPECT_NEAR(cv[i], want, tol) << i;
          cmax = std::max(cmax, static_cast<float>(std::fabs(cv[i])));
        }
        EXPECT_EQ(at(amax, 0), cmax);
      }
  {  // a bias of another length
    Fp8Scaling s = fp8_scaling({});
    Fp8Tensor q = fp8_quantize(Tensor::ones({4, 16}), s);
    EXPECT_THROW(fp8_matmul(q.data, q.scale_inv, q.data, q.scale_inv, DType::f32, Tensor(), Tensor::ones({5})),
                 ShapeError);
  }
  Fp8Scaling s5 = fp8_scaling({.format = Fp8Format::e5m2});
  Fp8Tensor q5 = fp8_quantize(Tensor::ones({4, 16}), s5);
  EXPECT_THROW(fp8_matmul(q5.data, q5.scale_inv, q5.data, q5.scale_inv), DTypeError);  // e5m2 · e5m2
  Fp8Scaling s4 = fp8_scaling({});
  Fp8Tensor q4 = fp8_quantize(Tensor::ones({4, 8}), s4);
  EXPECT_THROW(fp8_matmul(q4.data, q4.scale_inv, q5.data, q5.scale_inv), ShapeError);  // K 8 vs 16
  EXPECT_THROW(fp8_matmul(Tensor::ones({4, 8}), q4.scale_inv, q4.data, q4.scale_inv), DTypeError);
}

// fp8_linear against ops/fp8_linear.h's formulas, each operand quantized by the reference from
// the scale the rule gives for its amax; forward and all three gradients, for both gradient
// formats, with and without pow2 scales.
TEST(Fp8Linear, ForwardAndBackwardEqualTheFormula) {
  const int64_t B = 3, T = 8, K = 48, N = 24, M = B * T;
  for (Fp8Format gf : {Fp8Format::e5m2, Fp8Format::e4m3})
    for (bool pow2 : {true, false}) {
      SCOPED_TRACE(std::string("grad ") + fp8_format_name(gf) + (pow2 ? " pow2" : " exact"));
      std::vector<float> xv = normal(M * K, 1.f, 11), wv = normal(K * N, 0.02f, 12), bv = normal(N, 0.1f, 13),
                         gv = normal(M * N, 1e-3f, 14);
      xv[5] = 20.f;  // an outlier channel value
      Tensor x = Tensor::from_vector(xv, {B, T, K}).requires_grad_();
      Tensor w = Tensor::from_vector(wv, {K, N}).requires_grad_();
      Tensor b = Tensor::from_vector(bv, {N}).requires_grad_();
      Fp8LinearState st = fp8_linear_state({.grad_format = gf, .pow2 = pow2});
      Tensor y = fp8_linear(x, w, b, st);
      ASSERT_EQ(y.shape(), (Shape{B, T, N}));
      y.backward(Tensor::from_vector(gv, {B, T, N}));

      const float sx = ref_scale(amax_of(xv), 1, Fp8Format::e4m3, 0, pow2);
      const float sw = ref_scale(amax_of(wv), 1, Fp8Format::e4m3, 0, pow2);
      const float sg = ref_scale(amax_of(gv), 1, gf, 0, pow2);
      EXPECT_EQ(at(st.x.scale(), 0), sx);
      EXPECT_EQ(at(st.w.scale(), 0), sw);
      EXPECT_EQ(at(st.grad.scale(), 0), sg);
      const std::vector<double> qx = ref_values(ref_codes(xv, sx, Fp8Format::e4m3), Fp8Format::e4m3);  // (M, K)
      const std::vector<double> qw = ref_values(ref_codes(wv, sw, Fp8Format::e4m3), Fp8Format::e4m3);  // (K, N)
      const std::vector<double> qg = ref_values(ref_codes(gv, sg, gf), gf);                            // (M, N)
      const float ax = 1.f / sx, aw = 1.f / sw, ag = 1.f / sg;

      const RefProduct fy = ref_matmul_nt(qx, transpose(qw, K, N), M, N, K, ax * aw);  // (M, N)
      const std::vector<double> yv = y.to_double();
      for (int64_t i = 0; i < M * N; ++i) {
        const double want = fy.c[i] + bv[i % N];
        ASSERT_NEAR(yv[i], want, fy.bound[i] + std::ldexp(std::fabs(want), -23)) << "y " << i;
      }
      const RefProduct fdx = ref_matmul_nt(qg, qw, M, K, N, ag * aw);  // (M, N)·(K, N)ᵀ
      const std::vector<double> dx = x.grad().to_double();
      for (int64_t i = 0; i < M * K; ++i) ASSERT_NEAR(dx[i], fdx.c[i], fdx.bound[i]) << "dx " << i;
      const RefProduct fdw = ref_matmul_nt(transpose(qx, M, K), transpose(qg, M, N), K, N, M, ax * ag);  // (K, N)
      const std::vector<double> dw = w.grad().to_double();
      for (int64_t i = 0; i < K * N; ++i) ASSERT_NEAR(dw[i], fdw.c[i], fdw.bound[i]) << "dw " << i;
      const std::vector<double> db = b.grad().to_double();
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, abs_sum = 0;
        for (int64_t m = 0; m < M; ++m) s += gv[m * N + n], abs_sum += std::fabs(gv[m * N + n]);
        // summed in f32 by g's cast (ops/fp8_quantize.h's order): any order of M f32 additions is
        // within (M − 1)·2^-24·Σ|g| of the exact sum
        ASSERT_NEAR(db[n], s, M * std::ldexp(abs_sum, -24)) << "db " << n;
      }
    }
}

// The cast's column sums (fp8_linear's bias gradient): the documented order — rows in chunks of 8,
// chunks in tiles of 32, each sum from 0 — written out here in float, bit for bit, over shapes
// whose last chunk and tile are short (R = 5, 13, 300, 517) or whole (256, 512), f32 and bf16
// input, with and without the transpose; and within (R − 1)·2^-24·Σ|x| of the sum in double.
TEST(Fp8Quantize, ColumnSumsInTheirOrder) {
  for (int64_t R : {5, 13, 256, 300, 512, 517})
    for (DType dt : {DType::f32, DType::bf16})
      for (bool transpose : {false, true}) {
        const int64_t C = 24;
        SCOPED_TRACE("R " + std::to_string(R) + " " + dtype_name(dt) + (transpose ? " transposed" : ""));
        const Tensor x = Tensor::from_vector(normal(R * C, 1.f, 21), {R, C}).to(dt);
        Fp8Scaling sc = fp8_scaling({.format = Fp8Format::e5m2});
        const Fp8Tensor q = fp8_quantize(x, sc, transpose, Tensor(), /*column_sums=*/true);
        ASSERT_EQ(q.column_sums.shape(), (Shape{C}));
        const std::vector<double> xv = x.to_double(), got = q.column_sums.to_double();
        for (int64_t c = 0; c < C; ++c) {
          float total = 0;
          for (int64_t t0 = 0; t0 < R; t0 += 256) {
            float tile = 0;
            for (int64_t c0 = t0; c0 < std::min(R, t0 + 256); c0 += 8) {
              float chunk = 0;
              for (int64_t r = c0; r < std::min(R, c0 + 8); ++r) chunk += static_cast<float>(xv[r * C + c]);
              tile += chunk;
            }
            total += tile;
          }
          EXPECT_EQ(got[c], static_cast<double>(total)) << "column " << c;
          double exact = 0, abs_sum = 0;
          for (int64_t r = 0; r < R; ++r) exact += xv[r * C + c], abs_sum += std::fabs(xv[r * C + c]);
          EXPECT_NEAR(got[c], exact, R * std::ldexp(abs_sum, -24)) << "column " << c;
        }
      }
}

TEST(Fp8Linear, DelayedScalingCastsWithTheScalesOfTheLastUpdate) {
  const int64_t M = 16, K = 32, N = 16;
  std::vector<float> xv = normal(M * K, 2.f, 21), wv = normal(K * N, 0.05f, 22), gv = normal(M * N, 1.f, 23);
  Tensor x = Tensor::from_vector(xv, {M, K});  // no gradient wanted for x: dgrad is skipped
  Tensor w = Tensor::from_vector(wv, {K, N}).requires_grad_();
  Fp8LinearState st = fp8_linear_state({.mode = Fp8ScaleMode::delayed, .history = 4});
  for (int step = 0; step < 2; ++step) {
    const float sx = at(st.x.scale(), 0), sw = at(st.w.scale(), 0), sg = at(st.grad.scale(), 0);
    if (step == 0) {
      EXPECT_EQ(sx * sw * sg, 1.f);  // fresh state
    }
    w.zero_grad(true);
    Tensor y = fp8_linear(x, w, Tensor(), st);
    y.backward(Tensor::from_vector(gv, {M, N}));
    const std::vector<double> qx = ref_values(ref_codes(xv, sx, Fp8Format::e4m3), Fp8Format::e4m3);
    const std::vector<double> qw = ref_values(ref_codes(wv, sw, Fp8Format::e4m3), Fp8Format::e4m3);
    const std::vector<double> qg = ref_values(ref_codes(gv, sg, Fp8Format::e5m2), Fp8Format::e5m2);
    const RefProduct fy = ref_matmul_nt(qx, transpose(qw, K, N), M, N, K, (1.f / sx) * (1.f / sw));
    const std::vector<double> yv = y.to_double();
    for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(yv[i], fy.c[i], fy.bound[i]) << "step " << step << " y " << i;
    const RefProduct fdw = ref_matmul_nt(transpose(qx, M, K), transpose(qg, M, N), K, N, M, (1.f / sx) * (1.f / sg));
    const std::vector<double> dw = w.grad().to_double();
    for (int64_t i = 0; i < K * N; ++i) ASSERT_NEAR(dw[i], fdw.c[i], fdw.bound[i]) << "step " << step << " dw " << i;
    EXPECT_EQ(at(st.x.amax(), 0), amax_of(xv));
    EXPECT_EQ(at(st.grad.amax(), 0), amax_of(gv));
    fp8_linear_update(st);
    EXPECT_EQ(at(st.x.scale(), 0), ref_scale(amax_of(xv), sx, Fp8Format::e4m3, 0, true));
    EXPECT_EQ(at(st.w.scale(), 0), ref_scale(amax_of(wv), sw, Fp8Format::e4m3, 0, true));
    EXPECT_EQ(at(st.grad.scale(), 0), ref_scale(amax_of(gv), sg, Fp8Format::e5m2, 0, true));
  }
  EXPECT_THROW(fp8_linear(x, Tensor::ones({K + 1, N}), Tensor(), st), ShapeError);
}

// w stored (N, K) (w_out_in: Llama's layout) is cast as stored — its data the (N, K) operand the
// forward takes, its data_t the (K, N) one dgrad takes — and dw comes back in that layout: y, dx,
// db and the states are the bits of the (K, N) path on wᵀ, dw is its transpose (the same products
// in the same order: the CPU's sgemm sums over M in order either way).
TEST(Fp8Linear, AnOutInWeightIsCastAsStored) {
  const int64_t B = 2, T = 8, K = 48, N = 32, M = B * T;
  const std::vector<float> xv = normal(M * K, 1.f, 41), wv = normal(N * K, 0.05f, 42), bv = normal(N, 0.1f, 43),
                           gv = normal(M * N, 1e-2f, 44);
  std::vector<uint8_t> outs[2][6];  // [in_out, out_in] × (y, dx, dw (K, N), db, w state, grad state)
  for (int oi = 0; oi < 2; ++oi) {
    Tensor x = Tensor::from_vector(xv, {B, T, K}).to(DType::bf16).requires_grad_();
    Tensor w_nk = Tensor::from_vector(wv, {N, K}).to(DType::bf16);
    Tensor w = (oi ? w_nk : w_nk.transpose(0, 1).contiguous()).requires_grad_();  // (N, K) or (K, N)
    Tensor b = Tensor::from_vector(bv, {N}).to(DType::bf16).requires_grad_();
    Fp8LinearState st = fp8_linear_state({.grad_format = Fp8Format::e4m3});
    Tensor y = fp8_linear(x, w, b, st, oi == 1);
    y.backward(Tensor::from_vector(gv, {B, T, N}).to(DType::bf16));
    const Tensor dw = oi ? w.grad().transpose(0, 1).contiguous() : w.grad();  // (K, N)
    const Tensor ts[6] = {y.detach(), x.grad(), dw, b.grad(), st.w.state, st.grad.state};
    for (int j = 0; j < 6; ++j) {
      const Tensor c = ts[j].contiguous();
      outs[oi][j].assign(static_cast<const uint8_t*>(c.data_ptr()), static_cast<const uint8_t*>(c.data_ptr()) + c.nbytes());
    }
    if (oi) {
      EXPECT_EQ(w.grad().shape(), (Shape{N, K}));
    }
  }
  const char* names[6] = {"y", "dx", "dw", "db", "w state", "grad state"};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(outs[0][j], outs[1][j]) << names[j];
  Fp8LinearState st = fp8_linear_state({});
  EXPECT_THROW(fp8_linear(Tensor::ones({4, K}), Tensor::ones({K, N}), Tensor(), st, true), ShapeError);  // (K, N) as out_in
}
