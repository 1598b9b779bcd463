// Device-side element types: the CUDA storage type of each DType (f16 → __half, bf16 →
// __nv_bfloat16, f8e4m3 / f8e5m2 → __nv_fp8_e4m3 / __nv_fp8_e5m2), f32 loads/stores with
// round-to-nearest-even (fp8: saturating, as tensor/dtype.h), a dtype visitor for launchers,
// 16-byte packs for vectorised loads, and the grid-size helper. Included by tensor/cuda and
// ops/cuda only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/error.h"

namespace st::cuda {

using half = __half;
using bf16 = __nv_bfloat16;
using fp8e4m3 = __nv_fp8_e4m3;
using fp8e5m2 = __nv_fp8_e5m2;

// 16- and 8-bit floats: stored narrow, converted through f32
template <class T>
inline constexpr bool is_narrow_float =
    std::is_same_v<T, half> || std::is_same_v<T, bf16> || std::is_same_v<T, fp8e4m3> || std::is_same_v<T, fp8e5m2>;

template <class T>
__host__ __device__ inline float to_float(T v) {
  if constexpr (std::is_same_v<T, half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, bf16>)
    return __bfloat162float(v);
  else
    return static_cast<float>(v);  // fp8: exact (its explicit operator float)
}

template <class T>
__host__ __device__ inline T from_float(float v) {
  if constexpr (std::is_same_v<T, half>)
    return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(v);
  else
    return T(v);  // fp8: round to nearest even, saturating (__NV_SATFINITE), as tensor/dtype.h
}

// Conversion between any two storage types, exact where the CPU path is exact (integers go
// through double, 16- and 8-bit floats through f32 with one rounding).
template <class D, class S>
__device__ inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_narrow_float<D>) {
    if constexpr (std::is_integral_v<S>)
      return from_float<D>(static_cast<float>(static_cast<double>(v)));
    else
      return from_float<D>(to_float(v));
  } else if constexpr (is_narrow_float<S>) {
    return static_cast<D>(to_float(v));
  } else {
    return static_cast<D>(v);
  }
}

template <class T>
inline constexpr bool is_float_type = std::is_same_v<T, float> || is_narrow_float<T>;

// Calls fn(T{}) with the CUDA storage type of `t`.
template <class Fn>
decltype(auto) visit_cuda_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(half{});
    case DType::bf16: return fn(bf16{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
    case DType::f8e4m3: return fn(fp8e4m3{});
    case DType::f8e5m2: return fn(fp8e5m2{});
  }
  return fn(float{});
}

// Floating dtypes only; anything else is a DTypeError naming `op`.
template <class Fn>
decltype(auto) visit_float_dtype(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(half{});
    case DType::bf16: return fn(bf16{});
    default: break;
  }
  ST_THROW(DTypeError, op << ": CUDA kernel needs f32/f16/bf16, got " << dtype_name(t));
}

// 16 bytes of T, loaded and stored as one int4 (the pointer must be 16-byte aligned).
template <class T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
template <class T>
__device__ inline Pack<T> load_pack(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = __ldg(reinterpret_cast<const int4*>(p));
  return r;
}
template <class T>
__device__ inline void store_pack(T* p, const Pack<T>& r) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&r);
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for n items at `per_block` items per block, capped for grid-stride loops.
inline unsigned grid_for(int64_t n, int per_block, int64_t cap = 65535LL * 32) {
  int64_t g = (n + per_block - 1) / per_block;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

}  // namespace st::cuda
