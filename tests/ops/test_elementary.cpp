// ops/cpu_math/elementary.h: exp_f32, tanh_f32, log_f64, sincos_f64 and pow_f64 against long double
// (x87, 64-bit significand) on a sample of every float bit pattern (every 4099th one, ~1 M values of all
// magnitudes), their special values, and the bits they give on fixed inputs (recorded here:
// they use no libm, so any x86-64 machine must reproduce them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "ops/cpu_math/elementary.h"
#include "tensor/error.h"

using namespace st::ops::cpu;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Distance in floats between a and b (both finite or equal).
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

// Max ulp distance of f from the float nearest ref over the sample, and how many are not the nearest.
template <class F, class Ref>
std::pair<int64_t, int64_t> float_error(F f, Ref ref) {
  int64_t worst = 0, off = 0;
  for (uint64_t b = 0; b < (1ULL << 32); b += 4099) {
    const float x = from_bits(static_cast<uint32_t>(b));
    if (std::isnan(x)) continue;
    const float got = f(x), want = static_cast<float>(ref(static_cast<long double>(x)));
    const int64_t u = ulps(got, want);
    worst = std::max(worst, u);
    off += u != 0;
  }
  return {worst, off};
}

uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

}  // namespace

// Exhaustively (all 2³² floats, run by hand) exp_f32 and tanh_f32 were the nearest float except
// for 2 inputs each; 1 ulp is the bound stated in elementary.h's terms (one rounding of a value
// within 1e-15 relative).
TEST(Elementary, ExpAndTanhWithinOneUlpOfLongDouble) {
  auto [exp_worst, exp_off] = float_error(exp_f32, [](long double x) { return std::exp(x); });
  EXPECT_LE(exp_worst, 1);
  EXPECT_LE(exp_off, 2) << "exp_f32 is meant to be the nearest float almost always";
  auto [tanh_worst, tanh_off] = float_error(tanh_f32, [](long double x) { return std::tanh(x); });
  EXPECT_LE(tanh_worst, 1);
  EXPECT_LE(tanh_off, 2) << "tanh_f32 is meant to be the nearest float almost always";
}

// log_f64 over doubles of every magnitude (bit patterns in steps of a large odd number) and over
// [1, 1e6] (the row sums the kernels take logs of): within 2 ulp of the double nearest logl
// (1.9 measured over 6.7e7 values).
TEST(Elementary, LogWithinTwoUlpOfLongDouble) {
  double worst = 0;
  auto check = [&](double x) {
    const long double ref = std::log(static_cast<long double>(x));
    const double near = static_cast<double>(ref);
    const double ulp = std::nextafter(std::fabs(near), std::numeric_limits<double>::infinity()) - std::fabs(near);
    if (near != 0) worst = std::max(worst, static_cast<double>(std::fabs(log_f64(x) - ref) / ulp));
  };
  for (uint64_t b = 1; b < 0x7ff0000000000000ULL; b += 0x0000123456789abdULL) {
    double x;
    std::memcpy(&x, &b, sizeof x);
    check(x);
  }
  for (int i = 0; i < 1000000; ++i) check(1.0 + i * 0.999999);
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(log_f64(1.0), 0.0);
}

TEST(Elementary, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const double dinf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(exp_f32(0.f), 1.f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(-inf), 0.f);
  EXPECT_TRUE(std::isnan(exp_f32(nan)));
  EXPECT_EQ(exp_f32(88.73f), inf);                   // e^88.73 > FLT_MAX
  EXPECT_EQ(exp_f32(88.72f), 0x1.fe8c9p+127f);       // just below FLT_MAX (the nearest float, from expl)
  EXPECT_EQ(exp_f32(-103.9f), from_bits(1));         // the least subnormal
  EXPECT_EQ(exp_f32(-104.f), 0.f);
  EXPECT_EQ(log_f64(0.0), -dinf);
  EXPECT_EQ(log_f64(-0.0), -dinf);
  EXPECT_TRUE(std::isnan(log_f64(-1.0)));
  EXPECT_TRUE(std::isnan(log_f64(std::nan(""))));
  EXPECT_EQ(log_f64(dinf), dinf);
  EXPECT_NEAR(log_f64(5e-324), -744.4400719213812, 1e-12);  // the least subnormal
  EXPECT_EQ(tanh_f32(0.f), 0.f);
  EXPECT_TRUE(std::signbit(tanh_f32(-0.f)));
  EXPECT_EQ(tanh_f32(inf), 1.f);
  EXPECT_EQ(tanh_f32(-inf), -1.f);
  EXPECT_EQ(tanh_f32(-25.f), -1.f);
  EXPECT_TRUE(std::isnan(tanh_f32(nan)));
}

// The bits on 2²⁰ fixed inputs (the ranges the kernels use: exp of x − max ≤ 0 and of moderate
// positives, tanh of GELU's inner values, log of row sums), recorded on the machine that wrote
// the test. Any x86-64 machine, CPU or glibc must give the same: a libm call sneaking back in,
// or an FMA, shows up here when the suite runs elsewhere.
TEST(Elementary, RecordedBits) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < (1 << 20); ++i) {
    const float xe = -100.f + static_cast<float>(i) * (110.f / (1 << 20));
    const float xt = -8.f + static_cast<float>(i) * (16.f / (1 << 20));
    const double xl = 1.0 + static_cast<double>(i) * 0.95367431640625;
    const float e = exp_f32(xe), t = tanh_f32(xt);
    const double l = log_f64(xl);
    h = fnv1a(h, &e, sizeof e);
    h = fnv1a(h, &t, sizeof t);
    h = fnv1a(h, &l, sizeof l);
  }
  EXPECT_EQ(h, 0x5957660d8359c66bULL) << std::hex << "got 0x" << h;
}

// sincos_f64 on the rotary angles (f32 values in [0, 2²⁴]: position · inverse frequency) against
// x87 long double sinl/cosl (64-bit significand, glibc's own argument reduction): rounded to f32,
// the nearest float but in rare near-ties (its absolute error ~1e-16 is 2⁻²⁹ of an f32 ulp at 1,
// so a value 1 ulp off must sit within ~1e-9 ulp of a rounding boundary: none were seen). The
// sample: every 257th float below 2²⁴ (~4 M values, the largest arguments included), and the
// quadrant edges k·π/2 rounded to f32 (where the reduction cancels most).
TEST(Elementary, SinCosWithinOneUlpAndNearestOfLongDouble) {
  int64_t worst = 0, off = 0, n = 0;
  double worst_abs = 0;
  auto check = [&](float x) {
    double s, c;
    sincos_f64(x, s, c);
    const long double ls = std::sin(static_cast<long double>(x)), lc = std::cos(static_cast<long double>(x));
    worst_abs = std::max(worst_abs, static_cast<double>(std::max(std::fabs(ls - s), std::fabs(lc - c))));
    for (auto [got, want] : {std::pair{static_cast<float>(s), static_cast<float>(ls)},
                             std::pair{static_cast<float>(c), static_cast<float>(lc)}}) {
      const int64_t u = ulps(got, want);
      worst = std::max(worst, u);
      off += u != 0;
    }
    ++n;
  };
  for (uint32_t b = 0; from_bits(b) <= 0x1p24f; b += 257) check(from_bits(b));
  for (int64_t k = 1; k < 10000000; k += 977)  // k·π/2 < 2²⁴
    check(static_cast<float>(k * 1.5707963267948966));
  EXPECT_LE(worst, 1);
  EXPECT_EQ(off, 0) << "of " << n << " arguments";
  EXPECT_LT(worst_abs, 1e-15);
  double s, c;
  sincos_f64(0.0, s, c);
  EXPECT_EQ(s, 0.0);
  EXPECT_EQ(c, 1.0);
  EXPECT_THROW(sincos_f64(0x1p25, s, c), st::ValueError);
}

// pow_f64 (the inverse frequencies θ^(2i/D), ops/rope.h) against powl for the bases and exponents
// rotary tables use: relative error ≤ 1e-14 (elementary.h's bound for |x·ln b| ≤ 14), and the
// same float after rounding to f32.
TEST(Elementary, PowAgainstLongDouble) {
  double worst = 0;
  int64_t off = 0;
  for (double b : {10000.0, 500000.0, 1000000.0, 2.0, 0.5})
    for (int i = 0; i <= 256; ++i) {
      const double e = static_cast<float>(i) / 256.f;
      const long double want = std::pow(static_cast<long double>(b), static_cast<long double>(e));
      const double got = pow_f64(b, e);
      worst = std::max(worst, static_cast<double>(std::fabs((got - want) / want)));
      off += static_cast<float>(got) != static_cast<float>(want);
    }
  EXPECT_LT(worst, 1e-14);
  EXPECT_EQ(off, 0);
  EXPECT_THROW(pow_f64(0.0, 1.0), st::ValueError);
}
