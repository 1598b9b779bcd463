// exp, log, tanh without libm (ops/cpu_math/elementary.h). Textbook reductions evaluated in double:
//   exp: x = (k/32)·ln2 + r (Cody–Waite, |r| ≤ ln2/64), eʳ by its Taylor series to r⁵
//        (remainder < 3e-15 relative), times 2^((k mod 32)/32) from a table and 2^⌊k/32⌋ built
//        from the exponent bits;
//   log: x = 2ᵉ·m with m in [√½, √2), ln m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.1716, by the
//        series in s² to s²¹ (remainder < 1e-18 relative), plus e·ln2 (split in two);
//   tanh: 1 − 2/(e²ˣ + 1), or its Taylor series to x⁹ below 0.04 (where the subtraction would lose
//        digits; remainder < 1e-16 relative);
//   pow:  bˣ = exp(x·log b);
//   sin/cos: x = k·π/2 + r with π/2 in four parts (P1…P3 of 28 significant bits, so k·Pi is exact
//        for k < 2²⁴, and the double nearest the rest; together 142 bits of π/2), |r| ≤ π/4, sin r
//        and cos r by their Taylor series to r¹⁷ / r¹⁸ (remainders < 1e-19), the quadrant from k
//        mod 4. x − k·P1 is exact (Sterbenz), each later step rounds once near |r|.
// Only +, −, ×, ÷ and exact conversions are used, with no fused multiply-add (the build pins the
// ISA and -ffp-contract=off), so the bits are the same on every x86-64 CPU.
#include "ops/cpu_math/elementary.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/error.h"

namespace st::ops::cpu {
namespace {

constexpr double kLn2Hi = 0x1.62e42fee00000p-1;  // 32 significant bits: k·kLn2Hi/32 is exact for |k| < 2²¹
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // ln 2 − kLn2Hi
constexpr double k32InvLn2 = 0x1.71547652b82fep5;  // 32 / ln 2
constexpr double kRound = 0x1.8p52;                // y + kRound − kRound rounds y to an integer (|y| < 2⁵¹)

// 2^(j/32), j = 0…31, each the double nearest the exact value (from 60-digit decimal arithmetic).
constexpr double kExp2Table[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

// 2ⁿ for an integer n in [−1022, 1023].
double pow2(int64_t n) {
  const uint64_t bits = static_cast<uint64_t>(n + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// eˣ for x in [−700, 700] (2ⁿ stays a normal double); relative error a few 1e-16.
double exp_core(double x) {
  const double kd = (x * k32InvLn2 + kRound) - kRound;  // x ≈ (k/32)·ln 2
  const double r = (x - kd * (kLn2Hi / 32)) - kd * (kLn2Lo / 32);
  const int64_t k = static_cast<int64_t>(kd);
  double p = 1.0 / 120;
  p = 1.0 / 24 + r * p;
  p = 1.0 / 6 + r * p;
  p = 0.5 + r * p;
  p = 1.0 + r * p;
  p = 1.0 + r * p;
  return (kExp2Table[k & 31] * p) * pow2(k >> 5);  // k >> 5 = ⌊k/32⌋ (arithmetic shift, C++20)
}

// π/2 = kPio2_1 + kPio2_2 + kPio2_3 + kPio2_4 (+ 2e-43), from 200-digit decimal arithmetic
constexpr double kPio2_1 = 0x1.921fb54000000p+0;
constexpr double kPio2_2 = 0x1.10b4610000000p-30;
constexpr double kPio2_3 = 0x1.a626330000000p-58;
constexpr double kPio2_4 = 0x1.45c06e0e68948p-86;
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;

// sin r, cos r for |r| ≤ π/4 (and a little beyond): Taylor series in z = r², Horner from the top
double sin_core(double r) {
  const double z = r * r;
  double p = 1.0 / 355687428096000.0;  // 1/17!
  p = -1.0 / 1307674368000.0 + z * p;  // −1/15!
  p = 1.0 / 6227020800.0 + z * p;      // 1/13!
  p = -1.0 / 39916800.0 + z * p;       // −1/11!
  p = 1.0 / 362880.0 + z * p;          // 1/9!
  p = -1.0 / 5040.0 + z * p;           // −1/7!
  p = 1.0 / 120.0 + z * p;             // 1/5!
  p = -1.0 / 6.0 + z * p;              // −1/3!
  return r + (r * z) * p;
}
double cos_core(double r) {
  const double z = r * r;
  double p = -1.0 / 6402373705728000.0;  // −1/18!
  p = 1.0 / 20922789888000.0 + z * p;    // 1/16!
  p = -1.0 / 87178291200.0 + z * p;      // −1/14!
  p = 1.0 / 479001600.0 + z * p;         // 1/12!
  p = -1.0 / 3628800.0 + z * p;          // −1/10!
  p = 1.0 / 40320.0 + z * p;             // 1/8!
  p = -1.0 / 720.0 + z * p;              // −1/6!
  p = 1.0 / 24.0 + z * p;                // 1/4!
  p = -0.5 + z * p;                      // −1/2!
  return 1.0 + z * p;
}

}  // namespace

double exp_f64(double x) {
  ST_CHECK(x >= -700.0 && x <= 700.0, ValueError, "exp_f64: argument " << x << " outside [-700, 700]");
  return exp_core(x);
}

double pow_f64(double b, double x) {
  ST_CHECK(b > 0, ValueError, "pow_f64: base " << b << " must be positive");
  return exp_f64(x * log_f64(b));
}

void sincos_f64(double x, double& sin_x, double& cos_x) {
  ST_CHECK(std::fabs(x) <= 0x1p24, ValueError, "sincos_f64: argument " << x << " outside [-2^24, 2^24]");
  const double kd = (x * kTwoOverPi + kRound) - kRound;  // nearest integer to x / (π/2)
  const double r = (((x - kd * kPio2_1) - kd * kPio2_2) - kd * kPio2_3) - kd * kPio2_4;
  const double s = sin_core(r), c = cos_core(r);
  switch (static_cast<int64_t>(kd) & 3) {  // two's complement: the quadrant also for k < 0
    case 0: sin_x = s, cos_x = c; break;
    case 1: sin_x = c, cos_x = -s; break;
    case 2: sin_x = -s, cos_x = -c; break;
    default: sin_x = -c, cos_x = s; break;
  }
}

float exp_f32(float x) {
  if (x != x) return x + x;
  if (x > 89.f) return std::numeric_limits<float>::infinity();  // e⁸⁹ > FLT_MAX
  if (x < -104.f) return 0.f;                                    // e⁻¹⁰⁴ < 2⁻¹⁵⁰, half the least subnormal
  return static_cast<float>(exp_core(x));                        // one rounding, subnormals included
}

double log_f64(double x) {
  if (!(x > 0)) return x == 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (x == std::numeric_limits<double>::infinity()) return x;
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  int e = static_cast<int>(bits >> 52);  // x > 0: no sign bit
  if (e == 0) {                          // subnormal: scale into the normal range first
    const double y = x * 0x1p54;
    std::memcpy(&bits, &y, sizeof bits);
    e = static_cast<int>(bits >> 52) - 54;
  }
  e -= 1023;
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
  double m;  // [1, 2)
  std::memcpy(&m, &bits, sizeof m);
  if (m > 0x1.6a09e667f3bcdp0) {  // √2
    m *= 0.5;
    ++e;
  }
  const double f = m - 1.0;  // exact
  const double s = f / (2.0 + f), z = s * s;
  double p = 1.0 / 21;
  p = 1.0 / 19 + z * p;
  p = 1.0 / 17 + z * p;
  p = 1.0 / 15 + z * p;
  p = 1.0 / 13 + z * p;
  p = 1.0 / 11 + z * p;
  p = 1.0 / 9 + z * p;
  p = 1.0 / 7 + z * p;
  p = 1.0 / 5 + z * p;
  p = 1.0 / 3 + z * p;
  const double s2 = 2.0 * s;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + ((s2 + s2 * (z * p)) + de * kLn2Lo);
}

float tanh_f32(float x) {
  if (x != x) return x + x;
  const double a = std::fabs(static_cast<double>(x));
  double t;
  if (a >= 20.0) {
    t = 1.0;  // 1 − tanh 20 < 1e-17
  } else if (a < 0.04) {
    const double z = a * a;
    t = a + a * (z * (-1.0 / 3 + z * (2.0 / 15 + z * (-17.0 / 315 + z * (62.0 / 2835)))));
  } else {
    t = 1.0 - 2.0 / (exp_core(2.0 * a) + 1.0);
  }
  return std::copysign(static_cast<float>(t), x);
}

}  // namespace st::ops::cpu
