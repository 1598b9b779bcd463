// exp, log, tanh, pow and sin/cos for the CPU kernels and the rotary tables (ops/rope.h),
// computed here from +, −, ×, ÷ and exact conversions instead of calling libm. glibc picks an implementation of exp, log, pow, sin/cos and expf by
// the CPU it runs on (FMA/AVX2 variants or SSE2 ones) and the variants differ in the last bit
// (measured with glibc 2.36: expf for 2 of the 2³² floats, double exp for 7 in 10⁴ arguments);
// and a binary copied to another machine runs that machine's glibc. These functions give the
// same bits everywhere (docs/testing.md "CPU numerics").
// Accuracy: the result is computed in double (relative error a few 1e-16) and rounded once: over
// all 2³² floats exp_f32 and tanh_f32 were the nearest float but for 2 inputs each (1 ulp off);
// glibc 2.36's expf is 1 ulp off for 170 648 and tanhf for 118 674 314. log_f64 is within 2 ulp
// (tests/ops/test_elementary.cpp). Cost: 3.4 ns per exp_f32 against 1.7 ns for glibc's expf.
#pragma once

namespace st::ops::cpu {

float exp_f32(float x);    // eˣ; +inf above ln(FLT_MAX), +0 far below, NaN stays NaN
double log_f64(double x);  // ln x; −inf at ±0, NaN below 0 and for NaN, +inf at +inf
float tanh_f32(float x);   // tanh x; ±1 for |x| ≥ 20, NaN stays NaN
double exp_f64(double x);  // eˣ for |x| ≤ 700 (relative error < 4e-15); ValueError outside
// bˣ = e^(x·ln b) for b > 0 and |x·ln b| ≤ 700; relative error < 4e-15 + |x·ln b|·5e-16, so
// rounding it to f32 gives the nearest float but in rare near-ties
double pow_f64(double b, double x);
// sin x and cos x for |x| ≤ 2²⁴ (the rotary angles: position · inverse frequency, positions
// < 2²⁴); ValueError outside. Cody–Waite reduction by π/2 in four parts (k·part exact for
// k < 2²⁴), then Taylor series on [−π/4, π/4]: absolute error ~1e-16.
void sincos_f64(double x, double& sin_x, double& cos_x);

}  // namespace st::ops::cpu
