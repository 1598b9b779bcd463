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
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "fp32" || n == "float32") return DType::f32;
  if (n == "f16" || n == "fp16" || n == "float16") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  ST_THROW(ValueError, "unknown dtype '" << n << "' (expected f32, f16, bf16, i32, i64)");
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

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

}  // namespace st
