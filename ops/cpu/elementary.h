// exp, log and tanh for the CPU kernels, computed here from +, −, ×, ÷ and exact conversions
// instead of calling libm. glibc picks an implementation of exp, log, pow, sin/cos and expf by
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

}  // namespace st::ops::cpu
