// FP8 per-tensor scaling: the rule that turns a tensor's largest magnitude (amax) into the factor
// s its values are multiplied by before the cast to FP8, and the state that carries s, 1/s and the
// amaxes on the tensor's own device, where the cast and GEMM kernels read them through pointers
// (a CUDA graph replays them with whatever values the state holds then; no host value is baked in).
//
//   quantize    q = fp8(x · s)                 (tensor/dtype.h: nearest even, saturating)
//   dequantize  x ≈ f32(q) · s⁻¹               (the s⁻¹ a GEMM takes as its A/B scale)
//   the rule    s = fp8_max / (amax · 2^margin), rounded down to a power of two when pow2;
//               amax 0 or not finite: s keeps its previous value (an all-zero tensor quantizes
//               to zeros with any s; a non-finite one is a step the trainer skips anyway)
//
// pow2 (the default) costs at most one binade of range at the top (amax·s lands in (max/2, max]
// instead of at max), which only moves the underflow threshold of the smallest values by ≤ 2×
// (tests/bench/bench_fp8_error measures it). In return every step is exact: x·s and f32(q)·s⁻¹
// are exact (no second rounding before the cast, none in dequantization), s⁻¹ is exact, and the
// GEMM's scaling of its accumulator is exact, so the CPU emulation and the GPU GEMM differ only
// by the accumulation order of exact products.
//
// Where amax comes from (Fp8ScaleMode):
//   current  the amax of the tensor being cast, now: one more read of it before the cast; s
//            always fits the data
//   delayed  Transformer Engine's recipe: the cast uses the s of the last update and records its
//            input's amax in the same pass (max over every cast since that update);
//            fp8_scaling_update (once per step) pushes that amax into a history of the last N
//            and sets s from the history's max. A non-finite amax is not pushed. Values that
//            outgrow the history saturate at ±max until the next update.
//
// State: one f32 tensor (3 + N) on the device of the tensors it scales:
//   [0] s   [1] s⁻¹   [2] amax since the last update (current: of the last cast)   [3 …] history,
//   newest first (N = options.history; current scaling keeps N = 1, unused).
// The amax is stored as a float and max-accumulated on its bit pattern (|x| ≥ 0, so the integer
// order is the float order, and NaN > inf > finite): the same bits on the CPU and the GPU in any
// order.
#pragma once
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tensor/philox.h"  // ST_HOST_DEVICE
#include "tensor/tensor.h"

namespace st::ops {

enum class Fp8Format : uint8_t { e4m3, e5m2 };
enum class Fp8ScaleMode : uint8_t { current, delayed };

struct Fp8ScalingOptions {
  Fp8Format format = Fp8Format::e4m3;
  Fp8ScaleMode mode = Fp8ScaleMode::current;
  int64_t history = 16;  // delayed: amaxes kept (1 … 4096)
  int margin = 0;        // headroom: s = fp8_max / (amax · 2^margin) (0 … 32)
  bool pow2 = true;      // s rounded down to a power of two
};

// The state's slots
constexpr int64_t kFp8Scale = 0, kFp8ScaleInv = 1, kFp8Amax = 2, kFp8History = 3;

struct Fp8Scaling {
  Fp8ScalingOptions options;
  Tensor state;  // (3 + N) f32, see above

  Tensor scale() const { return state.narrow(0, kFp8Scale, 1); }         // (1) s
  Tensor scale_inv() const { return state.narrow(0, kFp8ScaleInv, 1); }  // (1) s⁻¹
  Tensor amax() const { return state.narrow(0, kFp8Amax, 1); }           // (1)
  Tensor history() const { return state.narrow(0, kFp8History, state.numel() - kFp8History); }  // (N)
};

// A fresh state on `device`: s = s⁻¹ = 1, amax and history 0. Throws ValueError for options out of range.
Fp8Scaling fp8_scaling(const Fp8ScalingOptions& options, Device device = Device::cpu);
// Delayed: push amax into the history (unless non-finite), amax ← 0, s from the history's max.
// Current: nothing (the cast sets s). On the state's device, in stream order.
void fp8_scaling_update(Fp8Scaling& scaling);
// The same for several states on one device (a model's GEMMs, once per optimizer step): on CUDA
// one launch for up to 256 delayed states (a block each, each the bits of its own update); on the
// CPU one update after another. Current states are left alone.
void fp8_scaling_update(const std::vector<Fp8Scaling*>& scalings);

// The state's f32 pointer, after checking it is the buffer fp8_scaling() made for these options
// (ValueError naming op otherwise).
float* fp8_state_ptr(const Fp8Scaling& scaling, const char* op);

float fp8_max(Fp8Format f);  // 448, 57344
DType fp8_dtype(Fp8Format f);
const char* fp8_format_name(Fp8Format f);  // "e4m3", "e5m2"

// ---- the rule, shared by ops/cpu/fp8_cast.cpp and ops/cuda/fp8_cast.cu (same operations, same bits) ----

ST_HOST_DEVICE inline float fp8_bits_as_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
ST_HOST_DEVICE inline uint32_t fp8_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// s from amax (see the header); prev when amax is 0 or not finite. One correctly rounded division,
// then exact operations: the margin and the power-of-two floor move only the exponent, and s is
// kept in [2^-126, 2^126] so that s and s⁻¹ are normal floats.
ST_HOST_DEVICE inline float fp8_scale_from_amax(float amax, float prev, float fmax, int margin, bool pow2) {
  if (!(amax > 0.f) || !(amax <= FLT_MAX)) return prev;
  float s = fmax / amax;                                                  // may be inf for tiny amax
  s = s * fp8_bits_as_float(static_cast<uint32_t>(127 - margin) << 23);  // · 2^-margin, exact
  const float lo = fp8_bits_as_float(1u << 23), hi = fp8_bits_as_float(253u << 23);  // 2^-126, 2^126
  s = s < lo ? lo : (s > hi ? hi : s);
  if (pow2) s = fp8_bits_as_float(fp8_float_bits(s) & 0x7f800000u);      // floor to 2^k
  return s;
}

// max of two amaxes by their bits (|x| ≥ 0: the integer order is the float order, NaN on top)
ST_HOST_DEVICE inline float fp8_amax_max(float a, float b) {
  return fp8_float_bits(a) >= fp8_float_bits(b) ? a : b;
}

// ---- overflow and underflow of a cast (what the metrics' fp8_overflow / fp8_underflow count) ----
// Of y = x · s (f32, as the cast computes it) and the bits a = |y|'s (f32_bits & 0x7fffffff):
//   overflow   y rounds past the format's max, so the cast saturates it: round to nearest even
//              without saturation would give more than max. E4M3: max 448 = 1.75·2^8, the next
//              step up would be 480, their midpoint 464 rounds to 448 (even), so |y| > 464;
//              E5M2: max 57344 = 1.75·2^15, the next step up 65536 (inf), the midpoint 61440
//              rounds to it (even), so |y| ≥ 61440 (tensor/dtype.cpp's f32_to_fp8: the same
//              bounds). ±inf counts; NaN does not (it is the canonical NaN, not a saturation).
//              As bits: kOverflowAbove < a ≤ 0x7f800000.
//   underflow  x ≠ 0 and y rounds to ±0: |y| ≤ half the smallest subnormal (2^-9 / 2 = 2^-10 for
//              E4M3, 2^-16 / 2 = 2^-17 for E5M2; the tie rounds to 0, the even code), an x·s that
//              is 0 in f32 included. As bits: a ≤ kUnderflowMax and |x| ≠ 0.
// tests/ops/test_fp8.cpp holds these bounds to the cast itself (either side of each).
struct Fp8RangeBits {
  uint32_t overflow_above;  // a > this (and ≤ inf): overflow
  uint32_t underflow_max;   // a ≤ this (and x ≠ 0): underflow
};
ST_HOST_DEVICE constexpr Fp8RangeBits fp8_range_bits(bool e4m3) {
  return e4m3 ? Fp8RangeBits{0x43e80000u, 0x3a800000u}           // 464, 2^-10
              : Fp8RangeBits{0x47700000u - 1u, 0x37000000u};      // just below 61440, 2^-17
}
// The per-element count: ax, ay the bits of |x| and |x·s| (the CUDA kernels' packed paths call it
// only for the rare pack that may hold an overflow or an underflow: ops/cuda/fp8_cast.cu).
struct Fp8RangeCount {
  uint32_t over = 0, under = 0;
  ST_HOST_DEVICE void add(uint32_t ax, uint32_t ay, Fp8RangeBits b) {
    over += (ay - (b.overflow_above + 1u)) <= (0x7f800000u - (b.overflow_above + 1u));  // b.over < ay ≤ inf
    under += (ay <= b.underflow_max) & (ax != 0u);
  }
};

namespace cpu {
void fp8_scaling_update(float* state, const Fp8ScalingOptions& options);
}  // namespace cpu
namespace cuda {
void fp8_scaling_update(float* state, const Fp8ScalingOptions& options);
void fp8_scaling_update(const std::vector<std::pair<float*, const Fp8ScalingOptions*>>& states);
}  // namespace cuda

}  // namespace st::ops
