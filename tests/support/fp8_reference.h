// An FP8 reference for the tests, written from the formats' definitions and nothing of
// tensor/dtype.cpp: every finite value of a format in double (std::ldexp of its fields), and the
// cast as a search for the nearest of them in double, ties to the even code, |x| > max → max,
// NaN → 0x7F (tensor/dtype.h's contract).
//
// The search is exact: x (a float) and the candidates are exact doubles, and the two distances
// compared, x − lo and hi − x, are exact whenever they are close to each other (then x lies within
// a factor 2 of lo and of hi, or lo = 0 and x − 0 is x itself: Sterbenz), so a tie is seen as one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace st::test {

struct Fp8Ref {
  int mant, bias;
  bool e4m3;
  std::vector<double> value;  // non-negative finite values, by code 0, 1, … (ascending)

  explicit Fp8Ref(bool is_e4m3) : mant(is_e4m3 ? 3 : 2), bias(is_e4m3 ? 7 : 15), e4m3(is_e4m3) {
    const int exps = is_e4m3 ? 16 : 32;
    for (int e = 0; e < exps; ++e)
      for (int m = 0; m < (1 << mant); ++m) {
        if (is_e4m3 && e == 15 && m == 7) continue;  // NaN
        if (!is_e4m3 && e == 31) continue;           // inf, NaN
        value.push_back(e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp(1.0 + std::ldexp(m, -mant), e - bias));
      }
  }
  double max() const { return value.back(); }
  // the code (sign clear) of value index i is i
  uint8_t encode(double x) const {
    if (std::isnan(x)) return 0x7f;
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(x);
    if (a >= max()) return sign | static_cast<uint8_t>(value.size() - 1);
    const size_t hi = static_cast<size_t>(std::upper_bound(value.begin(), value.end(), a) - value.begin());
    const size_t lo = hi - 1;  // value[lo] ≤ a < value[hi]
    const double dlo = a - value[lo], dhi = value[hi] - a;
    const size_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi));
    return sign | static_cast<uint8_t>(pick);
  }
  // the value of a code; NaN for NaN codes, ±inf for e5m2's
  double decode(uint8_t code) const {
    const double sign = (code & 0x80) ? -1.0 : 1.0;
    const size_t c = code & 0x7f;
    if (c < value.size()) return sign * value[c];
    if (!e4m3 && c == 0x7c) return sign * INFINITY;
    return NAN;
  }
};

}  // namespace st::test
