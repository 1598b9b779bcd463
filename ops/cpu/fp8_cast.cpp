// FP8 casts, amax and the scaling state's updates on the CPU (ops/fp8_quantize.h,
// ops/fp8_scaling.h): plain loops in a fixed order; the cast is x · s in f32 (one rounding) then
// tensor/dtype.h's f32 → fp8 (nearest even, saturating), which ops/cuda/fp8_cast.cu matches bit
// for bit with the GPU's cvt.rn.satfinite.
#include <array>

#include "ops/fp8_quantize.h"

namespace st::ops::cpu {
namespace {

template <class T>
float load(const T& v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return to_f32(v);
}

template <class Fn>
void visit_input(const Tensor& x, Fn&& fn) {
  switch (x.dtype()) {
    case DType::f32: return fn(x.data<float>());
    case DType::f16: return fn(x.data<Half>());
    case DType::bf16: return fn(x.data<BFloat16>());
    default: ST_THROW(DTypeError, "fp8: input must be f32, f16 or bf16, got " << x.describe());
  }
}

uint8_t encode(float v, DType dt) { return dt == DType::f8e4m3 ? f32_to_e4m3_bits(v) : f32_to_e5m2_bits(v); }

// The 256 values of an fp8 format (decoding by table)
std::array<float, 256> decode_table(DType dt) {
  std::array<float, 256> t;
  for (int c = 0; c < 256; ++c)
    t[c] = dt == DType::f8e4m3 ? e4m3_bits_to_f32(static_cast<uint8_t>(c)) : e5m2_bits_to_f32(static_cast<uint8_t>(c));
  return t;
}


}  // namespace

void fp8_amax(const Tensor& x, float* amax) {
  visit_input(x, [&](const auto* p) {
    uint32_t m = f32_bits(*amax);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t b = f32_bits(load(p[i])) & 0x7fffffffu;  // |x|
      m = b > m ? b : m;
    }
    *amax = bits_f32(m);
  });
}

void fp8_scale_current(float* state, const Fp8ScalingOptions& o) {
  state[kFp8Scale] = fp8_scale_from_amax(state[kFp8Amax], state[kFp8Scale], fp8_max(o.format), o.margin, o.pow2);
  state[kFp8ScaleInv] = 1.f / state[kFp8Scale];
}

void fp8_scaling_update(float* state, const Fp8ScalingOptions& o) {
  float* h = state + kFp8History;  // (N) newest first
  const int64_t n = o.history;
  const float a = state[kFp8Amax];
  if (f32_bits(a) < 0x7f800000u) {  // finite (≥ 0 by construction)
    for (int64_t i = n - 1; i > 0; --i) h[i] = h[i - 1];
    h[0] = a;
  }
  state[kFp8Amax] = 0.f;
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = fp8_amax_max(m, h[i]);
  state[kFp8Scale] = fp8_scale_from_amax(m, state[kFp8Scale], fp8_max(o.format), o.margin, o.pow2);
  state[kFp8ScaleInv] = 1.f / state[kFp8Scale];
}

void fp8_cast(const Tensor& x, Tensor& q, Tensor& qt, float* state, bool record, float* scale_inv, int64_t* counts,
              float* column_sums) {
  const int64_t R = x.size(0), C = x.size(1);
  const float s = state[kFp8Scale];
  const DType dt = q.dtype();
  const Fp8RangeBits range = fp8_range_bits(dt == DType::f8e4m3);
  uint8_t* d = static_cast<uint8_t*>(q.data_ptr());                                  // (R, C)
  uint8_t* dt_ptr = qt.defined() ? static_cast<uint8_t*>(qt.data_ptr()) : nullptr;   // (C, R)
  visit_input(x, [&](const auto* p) {
    uint32_t m = 0;
    int64_t over = 0, under = 0;
    for (int64_t r = 0; r < R; ++r) {
      Fp8RangeCount n;  // this row's (the CUDA kernels' per-element update; 32-bit per row)
      for (int64_t c = 0; c < C; ++c) {
        const float v = load(p[r * C + c]), y = v * s;
        const uint8_t b = encode(y, dt);
        d[r * C + c] = b;
        if (dt_ptr) dt_ptr[c * R + r] = b;
        const uint32_t a = f32_bits(v) & 0x7fffffffu;
        m = a > m ? a : m;
        n.add(a, f32_bits(y) & 0x7fffffffu, range);
      }
      over += n.over;
      under += n.under;
    }
    if (record) state[kFp8Amax] = fp8_amax_max(state[kFp8Amax], bits_f32(m));
    if (counts) counts[0] += over, counts[1] += under;
    if (column_sums)  // ops/fp8_quantize.h's order
      for (int64_t c = 0; c < C; ++c) column_sums[c] = fp8_column_sum(R, [&](int64_t r) { return load(p[r * C + c]); });
  });
  *scale_inv = state[kFp8ScaleInv];
}

void fp8_dequantize(const Tensor& q, const float* scale_inv, Tensor& out) {
  const std::array<float, 256> table = decode_table(q.dtype());
  const uint8_t* p = static_cast<const uint8_t*>(q.data_ptr());
  const float si = *scale_inv;
  const int64_t n = q.numel();
  Tensor o32 = out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32);
  float* o = o32.data<float>();
  for (int64_t i = 0; i < n; ++i) o[i] = table[p[i]] * si;
  if (!o32.same(out)) out.copy_(o32);
}

}  // namespace st::ops::cpu
