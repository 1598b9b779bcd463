// The overflow and underflow counts of the FP8 casts (ops/fp8_scaling.h "overflow and underflow",
// ops/fp8_quantize.h's counts, fp8_linear's Fp8LinearState::counts) on the CPU:
//   1. the bounds are the cast's own: for values on either side of each bound, the count says
//      overflow exactly when a nearest-even rounding without saturation (tests/support/
//      fp8_reference.h's formats, nothing of tensor/dtype.cpp) would pass the format's max, and
//      underflow exactly when x ≠ 0 and the cast's byte is ±0;
//   2. a crafted tensor's counts in closed form: current scaling (its amax sets s) with a known
//      number of values under half the smallest subnormal after scaling, and a forced scale
//      (delayed scaling's s, written into the state) with known saturations; in both layouts of the
//      cast (with and without the transpose) and from bf16; the counts add up over casts;
//   3. fp8_linear forward + backward counts its three casts (x, w; the output gradient) in closed form.
// The CUDA kernels' counts are held to these by tests/gpu/test_gpu_fp8.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/elementwise.h"
#include "ops/fp8_linear.h"
#include "ops/fp8_quantize.h"
#include "ops/reduce.h"
#include "tests/support/fp8_reference.h"

using namespace st;
using namespace st::ops;
using st::test::Fp8Ref;

namespace {

// [overflow, underflow] of one cast of x at a forced scale s (delayed scaling: the cast uses the
// state's s as it is); transpose: the (R, C) → (C, R) path as well
std::vector<int64_t> counts_at(const Tensor& x, Fp8Format f, float s, bool transpose = false) {
  Fp8Scaling sc = fp8_scaling({.format = f, .mode = Fp8ScaleMode::delayed, .history = 1});
  sc.state.data<float>()[kFp8Scale] = s;
  sc.state.data<float>()[kFp8ScaleInv] = 1.f / s;
  Tensor counts = Tensor::zeros({2}, DType::i64);
  fp8_quantize(x, sc, transpose, counts);
  return {counts.data<int64_t>()[0], counts.data<int64_t>()[1]};
}

float next_up(float v) { return std::nextafter(v, std::numeric_limits<float>::infinity()); }
float next_down(float v) { return std::nextafter(v, 0.f); }

// 1. Each probe y cast alone at s = 1, against the definitions from the reference format.
TEST(Fp8Counts, BoundsAreTheCastsOwn) {
  for (bool e4m3 : {true, false}) {
    const Fp8Ref ref(e4m3);
    const Fp8Format f = e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    const size_t top = ref.value.size() - 1;                       // max's code
    const double ulp = ref.value[top] - ref.value[top - 1];       // the top binade's step
    const double mid = ref.max() + ulp / 2;                        // max and the next step up: 464, 61440
    const bool mid_to_max = top % 2 == 0;                          // the tie goes to the even code
    const float half_sub = static_cast<float>(ref.value[1] / 2);   // 2^-10, 2^-17
    const float fmid = static_cast<float>(mid);
    std::vector<float> probes{0.f,  -0.f, static_cast<float>(ref.max()), next_up(static_cast<float>(ref.max())),
                              next_down(fmid), fmid, next_up(fmid), 2 * fmid, 1e30f,
                              std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), next_down(half_sub), half_sub, next_up(half_sub),
                              static_cast<float>(ref.value[1]), half_sub / 4, std::numeric_limits<float>::denorm_min(),
                              1e-30f, 1.f};
    int64_t want_over = 0, want_under = 0;
    for (float p : probes)
      for (float y : {p, -p}) {
        const double a = std::fabs(static_cast<double>(y));
        const bool over = !std::isnan(y) && (a > mid || (a == mid && !mid_to_max));
        const bool under = y != 0.f && !std::isnan(y) && (ref.encode(y) & 0x7f) == 0;
        SCOPED_TRACE(std::string(e4m3 ? "e4m3" : "e5m2") + " y = " + std::to_string(y));
        const std::vector<int64_t> got = counts_at(Tensor::from_vector(std::vector<float>{y}, {1}), f, 1.f);
        EXPECT_EQ(got[0], over ? 1 : 0);
        EXPECT_EQ(got[1], under ? 1 : 0);
        want_over += over, want_under += under;
      }
    // the bounds as ops/fp8_scaling.h states them: E4M3 |y| > 464, E5M2 |y| ≥ 61440; |y| ≤ 2^-10 / 2^-17
    EXPECT_EQ(mid, e4m3 ? 464.0 : 61440.0);
    EXPECT_EQ(mid_to_max, e4m3);
    EXPECT_EQ(half_sub, e4m3 ? std::ldexp(1.f, -10) : std::ldexp(1.f, -17));
    // per sign: e4m3 next_up(mid), 2·mid, 1e30, FLT_MAX, inf = 5 (mid itself rounds to max);
    // e5m2 the same and mid = 6. Underflow: below, at half the subnormal, a quarter, denorm_min, 1e-30 = 5
    EXPECT_EQ(want_over, 2 * (e4m3 ? 5 : 6));
    EXPECT_EQ(want_under, 2 * 5);
  }
}

// 2a. Current scaling: amax 3 → s = 448 / 3 = 149.3 → 128 (pow2). Underflow below 2^-10 / 128 =
// 2^-17 (E4M3) and 2^-17 / 128 = 2^-24 (E5M2, s = 57344 / 3 → 16384: 2^-17 / 16384 = 2^-31).
TEST(Fp8Counts, CurrentScalingUnderflowsInClosedForm) {
  const int64_t R = 16, C = 24;  // 384 elements: the amax, k tiny values of each kind, the rest ordinary
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const bool e4m3 = f == Fp8Format::e4m3;
    const float s = e4m3 ? 128.f : 16384.f, bound = (e4m3 ? std::ldexp(1.f, -10) : std::ldexp(1.f, -17)) / s;
    std::vector<float> v(static_cast<size_t>(R * C));
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.f : 1.f) * (0.5f + static_cast<float>(i % 7) * 0.25f);
    v[5] = -3.f;  // the amax
    int64_t under = 0;
    // at the bound (a tie, to 0), halfway below it, far below: underflow; above it by bf16's step
    // (1 + 2^-7): the smallest subnormal. Every value is a bf16 value (k/4, powers of two, 1 + 2^-7).
    const float up = bound * 1.0078125f;
    const float tiny[] = {bound, bound / 2, bound / 1024, -bound, up, -up, 0.f};
    for (int k = 0; k < 7; ++k)
      for (int j = 0; j < 9; ++j) {
        const size_t i = static_cast<size_t>(40 + k * 30 + j);
        v[i] = tiny[k];
        under += k < 4;  // next_up(bound) rounds to the smallest subnormal; 0 is not an underflow
      }
    ASSERT_EQ(under, 36);
    for (DType dt : {DType::f32, DType::bf16})
      for (bool transpose : {false, true}) {
        SCOPED_TRACE(std::string(fp8_format_name(f)) + " " + dtype_name(dt) + (transpose ? " transposed" : ""));
        Tensor x = Tensor::from_vector(v, {R, C}).to(dt);
        ASSERT_EQ(x.to(DType::f32).to_float(), v);  // bf16 holds every value exactly
        Fp8Scaling sc = fp8_scaling({.format = f});
        Tensor counts = Tensor::zeros({2}, DType::i64);
        fp8_quantize(x, sc, transpose, counts);
        EXPECT_EQ(sc.scale().to_float()[0], s);
        EXPECT_EQ(counts.to_double(), (std::vector<double>{0, static_cast<double>(under)}));
        fp8_quantize(x, sc, transpose, counts);  // += : a second cast adds as much again
        EXPECT_EQ(counts.to_double(), (std::vector<double>{0, 2.0 * static_cast<double>(under)}));
      }
  }
}

// 2b. A forced scale (delayed scaling's s as it stands): saturations in closed form. E4M3 at s = 4:
// |x| > 116 overflows (464 / 4), |x| = 116 rounds to 448; E5M2 at s = 4: |x| ≥ 15360 (61440 / 4).
TEST(Fp8Counts, ForcedScaleSaturatesInClosedForm) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const bool e4m3 = f == Fp8Format::e4m3;
    const float edge = e4m3 ? 116.f : 15360.f;  // the overflow bound / s
    // overflow: e4m3 next_up(116), 200, −1e6, inf, −inf (116 itself not); e5m2 also 15360 itself
    std::vector<float> v{edge, next_up(edge), -next_down(edge), 200.f * (e4m3 ? 1 : 100), -1e6f, inf, -inf, nan,
                         1.f, 0.f, e4m3 ? 112.f : 14336.f};
    const int64_t over = e4m3 ? 5 : 6;
    for (bool transpose : {false, true}) {
      SCOPED_TRACE(std::string(fp8_format_name(f)) + (transpose ? " transposed" : ""));
      std::vector<float> x;  // the probes in a (3, 11) tensor: each row the same
      for (int r = 0; r < 3; ++r) x.insert(x.end(), v.begin(), v.end());
      const std::vector<int64_t> got = counts_at(Tensor::from_vector(x, {3, 11}), f, 4.f, transpose);
      EXPECT_EQ(got[0], 3 * over);
      EXPECT_EQ(got[1], 0);
    }
  }
}

// 3. fp8_linear's three casts, forward then backward, into one counts tensor. x and g hold 1 as
// their amax (current scaling: s = 448 → 256) and some values of 2^-20 (2^-20 · 256 = 2^-12 <
// 2^-10: underflow); w holds 0.5 (s = 512) and values of 2^-21 (2^-12 again). E4M3 throughout
// (the trainer's recipe: fp8_training_recipe's E4M3 gradients).
TEST(Fp8Counts, LinearCountsItsThreeCasts) {
  const int64_t M = 8, K = 16, N = 12;
  auto filled = [](int64_t rows, int64_t cols, float big, float tiny, int every) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    int64_t n = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = i % every == 3 ? tiny : big * (i % 3 ? 0.5f : -1.f);
      n += i % every == 3;
    }
    return std::pair{Tensor::from_vector(v, {rows, cols}), n};
  };
  auto [x, nx] = filled(M, K, 1.f, std::ldexp(1.f, -20), 5);
  auto [w, nw] = filled(K, N, 0.5f, std::ldexp(1.f, -21), 7);
  auto [g, ng] = filled(M, N, 1.f, -std::ldexp(1.f, -20), 4);
  Fp8LinearOptions o;
  o.grad_format = Fp8Format::e4m3;
  Fp8LinearState st = fp8_linear_state(o);
  st.counts = Tensor::zeros({2}, DType::i64);
  Tensor xi = x.detach().requires_grad_(true), wi = w.detach().requires_grad_(true);
  Tensor y = fp8_linear(xi, wi, Tensor(), st);
  EXPECT_EQ(st.counts.to_double(), (std::vector<double>{0, static_cast<double>(nx + nw)}));
  sum(mul(y, g)).backward();  // the output gradient is g
  EXPECT_EQ(st.counts.to_double(), (std::vector<double>{0, static_cast<double>(nx + nw + ng)}));
  EXPECT_EQ(nx, 25);  // 128 elements, i % 5 = 3
  EXPECT_EQ(nw, 27);  // 192 elements, i % 7 = 3
  EXPECT_EQ(ng, 24);  // 96 elements, i % 4 = 3
  // no counts tensor: nothing counted, nothing fails
  Fp8LinearState plain = fp8_linear_state(o);
  EXPECT_FALSE(plain.counts.defined());
  fp8_linear(x, w, Tensor(), plain);
}

TEST(Fp8Counts, RejectsACountsTensorOfTheWrongShape) {
  Fp8Scaling sc = fp8_scaling({});
  EXPECT_THROW(fp8_quantize(Tensor::ones({4}), sc, false, Tensor::zeros({3}, DType::i64)), ValueError);
  EXPECT_THROW(fp8_quantize(Tensor::ones({4}), sc, false, Tensor::zeros({2}, DType::f32)), ValueError);
}

}  // namespace
