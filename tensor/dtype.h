// Element types and devices, plus exact f16 / bf16 / fp8 conversions (round-to-nearest-even).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace st {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, f8e4m3, f8e5m2 };
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f16", ...
DType dtype_from_name(const std::string& name);  // throws ValueError
bool is_floating(DType t);  // f32, f16, bf16: the dtypes ops compute in and autograd differentiates
bool is_fp8(DType t);       // f8e4m3, f8e5m2: storage only (ops/fp8_quantize.h casts with a scale)
const char* device_name(Device d);

// 16-bit float storage types. Arithmetic happens in f32 (CPU ops compute in f32 and round on store).
struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16_bits(float f);  // RNE; overflow → ±inf; NaN stays NaN
float f16_bits_to_f32(uint16_t h);

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

// 8-bit float storage types (OCP FP8), for the FP8 GEMMs (ops/fp8_matmul.h); no arithmetic on them.
//   e4m3 ("e4m3fn"): bias 7, 3 mantissa bits, no infinities, NaN = S.1111.111, max 448, smallest
//                    subnormal 2^-9
//   e5m2:            bias 15, 2 mantissa bits, IEEE-like (±inf = S.11111.00, NaN = S.11111.xx),
//                    max 57344, smallest subnormal 2^-16
// f32 → fp8 rounds to nearest even (subnormals included) and saturates: |x| > max, ±inf included,
// gives ±max; NaN gives 0x7F (either sign). That is the "satfinite" cast of the GPU's
// cvt.rn.satfinite (sm_89+): CUDA's own host emulation of it (cuda_fp8.hpp) gives the same byte
// for every f32 (tests/tensor/test_fp8_cuda_emulation.cpp), the GPU is held to it by
// tests/gpu/test_gpu_fp8.cpp. fp8 → f32 is exact. f16 / bf16 convert through f32 (exact), so
// they round once too.
struct Float8E4M3 {
  uint8_t bits = 0;
};
struct Float8E5M2 {
  uint8_t bits = 0;
};
uint8_t f32_to_e4m3_bits(float f);
uint8_t f32_to_e5m2_bits(float f);
float e4m3_bits_to_f32(uint8_t b);
float e5m2_bits_to_f32(uint8_t b);

inline float to_f32(Half h) { return f16_bits_to_f32(h.bits); }
inline float to_f32(BFloat16 b) { return bf16_bits_to_f32(b.bits); }
inline Half to_half(float f) { return Half{f32_to_f16_bits(f)}; }
inline BFloat16 to_bf16(float f) { return BFloat16{f32_to_bf16_bits(f)}; }
inline float to_f32(Float8E4M3 v) { return e4m3_bits_to_f32(v.bits); }
inline float to_f32(Float8E5M2 v) { return e5m2_bits_to_f32(v.bits); }

// Calls fn(T{}) with T the C++ storage type of `t` (float, Half, BFloat16, int32_t, int64_t,
// Float8E4M3, Float8E5M2).
template <class Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
    case DType::f8e4m3: return fn(Float8E4M3{});
    case DType::f8e5m2: return fn(Float8E5M2{});
  }
  return fn(float{});
}

// Uniform scalar load/store through double (exact for every element type we hold; a store to a
// 16- or 8-bit float rounds through f32).
template <class T>
inline constexpr bool is_narrow_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
                                          std::is_same_v<T, Float8E4M3> || std::is_same_v<T, Float8E5M2>;
template <class T>
inline double load_as_double(const T& v) {
  if constexpr (is_narrow_float_v<T>)
    return to_f32(v);
  else
    return static_cast<double>(v);
}
template <class T>
inline T store_from_double(double v) {
  if constexpr (std::is_same_v<T, Half>)
    return to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, Float8E4M3>)
    return Float8E4M3{f32_to_e4m3_bits(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, Float8E5M2>)
    return Float8E5M2{f32_to_e5m2_bits(static_cast<float>(v))};
  else
    return static_cast<T>(v);
}

}  // namespace st
