#include "tensor/dtype.h"

#include "tensor/error.h"

namespace st {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f8e4m3: return 1;
    case DType::f8e5m2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "fp32" || n == "float32") return DType::f32;
  if (n == "f16" || n == "fp16" || n == "float16") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  if (n == "f8e4m3" || n == "float8_e4m3fn") return DType::f8e4m3;
  if (n == "f8e5m2" || n == "float8_e5m2") return DType::f8e5m2;
  ST_THROW(ValueError, "unknown dtype '" << n << "' (expected f32, f16, bf16, i32, i64, f8e4m3, f8e5m2)");
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// f32 → f16, round to nearest even, exact for subnormals.
uint16_t f32_to_f16_bits(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;           // NaN
  if (absx >= 0x477ff000u) return sign | 0x7c00u;          // ≥ 65520 rounds to inf
  if (absx < 0x38800000u) {                                // below smallest normal 2^-14
    if (absx < 0x33000000u) return sign;                   // < 2^-25: rounds to zero
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);        // 14 + (113 - exp) ...
    // value = mant * 2^(e-150); f16 subnormal unit is 2^-24 → result = mant >> (126 - e) with rounding
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // normal: rebias exponent 127 → 15, keep 10 mantissa bits with RNE
  uint32_t r = absx - 0x38000000u;  // (127-15) << 23
  uint32_t q = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant · 2^-24
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// One FP8 format: M mantissa bits, exponent bias, the largest finite magnitude's code (sign clear)
// and its f32 bits.
struct Fp8Format {
  int mant;
  int bias;
  uint8_t max_code;
  uint32_t max_f32_bits;
};
constexpr Fp8Format kE4M3{3, 7, 0x7e, 0x43e00000u};   // 448 = 1.75 · 2^8
constexpr Fp8Format kE5M2{2, 15, 0x7b, 0x47600000u};  // 57344 = 1.75 · 2^15

// f32 → fp8, round to nearest even, saturating. Every |x| above max (inf included) gives max:
// for e4m3 the next step up would be 480, so (448, 464] rounds to 448 anyway and beyond is
// clamped; for e5m2 (57344, 61440) rounds to 57344 and from 61440 on, where RNE would give
// inf, satfinite clamps. So saturation is a clamp of |x| before rounding.
uint8_t f32_to_fp8(float f, const Fp8Format& fmt) {
  const uint32_t x = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                          // NaN → the canonical NaN
  if (a >= fmt.max_f32_bits) return sign | fmt.max_code;       // max, beyond, ±inf
  const int drop = 23 - fmt.mant;                              // f32 mantissa bits rounded off
  const uint32_t min_normal = static_cast<uint32_t>(127 + 1 - fmt.bias) << 23;
  if (a >= min_normal) {
    // normal: rebias the exponent (127 → bias) and round off `drop` bits; a carry out of the
    // mantissa moves to the next exponent, which is the right result
    const uint32_t r = a - (static_cast<uint32_t>(127 - fmt.bias) << 23);
    uint32_t q = r >> drop;
    const uint32_t rem = r & ((1u << drop) - 1), half = 1u << (drop - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint8_t>(q);
  }
  // subnormal: |x| / 2^(1 - bias - mant) rounded to an integer (2^mant: the smallest normal, whose
  // code is that integer too). |x| = m24 · 2^(e - 150), so the quotient is m24 >> shift.
  const int e = static_cast<int>(a >> 23);
  const int shift = 150 + (1 - fmt.bias - fmt.mant) - e;       // ≥ 21 here
  if (e == 0 || shift > 24) return sign;                       // below half the smallest subnormal
  const uint32_t m24 = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = m24 >> shift;
  const uint32_t rem = m24 & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint8_t>(q);
}

}  // namespace

uint8_t f32_to_e4m3_bits(float f) { return f32_to_fp8(f, kE4M3); }
uint8_t f32_to_e5m2_bits(float f) { return f32_to_fp8(f, kE5M2); }

float e4m3_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return bits_f32(sign | 0x7fc00000u);  // the only NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 512.0f);      // mant · 2^-9
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}

float e5m2_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu, mant = b & 0x3u;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 21) : 0u));  // ±inf, NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 65536.0f);    // mant · 2^-16
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 21));
}

}  // namespace st
