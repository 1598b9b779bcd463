// FP8 casts, amax and the scaling state's updates on CUDA (ops/fp8_quantize.h, ops/fp8_scaling.h),
// every value as ops/cpu/fp8_cast.cpp computes it:
//   cast      q = cvt.rn.satfinite(x · s): __fmul_rn (one rounding, never contracted) then the
//             hardware conversion (sm_89+), which rounds to nearest even and saturates as
//             tensor/dtype.h does (tests/gpu/test_gpu_fp8.cpp holds the two bit for bit).
//   amax      max over |x|'s bit patterns (unsigned max: order-free, so bit-equal to the CPU's
//             loop): per warp __reduce_max_sync, then one atomicMax per warp on the state's slot.
//   the rule  fp8_scale_from_amax (ops/fp8_scaling.h), the same function on the host and the device.
// Kernels:
//   amax_kernel           x (n) → *amax max= max |x|                grid-stride
//   cast_kernel           x (n) → q (n), records amax               grid-stride
//   cast_transpose_kernel x (R, C) → q (R, C), qt (C, R)            32×32 tiles through shared
//                         memory (block 32 × 8, 4 rows a thread): reads and both writes coalesced
//   scale_current_kernel  state: s from amax                        one thread
//   update_kernel         state: history ← amax, s from its max     one block, history in shared memory
//   dequantize_kernel     q (n) → out (n) = f32(q) · s⁻¹            grid-stride
// The s a cast multiplies by and the s⁻¹ it reports are read from the state in device memory by
// the kernel itself, so a captured CUDA graph replays them with the state's current values.
#include "ops/cuda/common.cuh"
#include "ops/fp8_quantize.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32, kTileRows = 8;  // cast_transpose: 32 × 32 tile, 32 × 8 threads

template <__nv_fp8_interpretation_t F>
__device__ inline uint8_t encode(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, F));
}

__device__ inline uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// the warp's max of m; lane 0 max-accumulates it into *slot (a float's bits, ≥ 0)
__device__ inline void warp_amax(uint32_t m, float* slot) {
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(reinterpret_cast<unsigned int*>(slot), m);
}

template <class T>
__global__ void amax_kernel(const T* x, int64_t n, float* amax) {
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    m = max(m, abs_bits(to_float(x[i])));
  warp_amax(m, amax);
}

template <class T, __nv_fp8_interpretation_t F>
__global__ void cast_kernel(const T* x, uint8_t* q, int64_t n, float* state, bool record, float* scale_inv) {
  const float s = state[kFp8Scale];
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = to_float(x[i]);
    q[i] = encode<F>(__fmul_rn(v, s));
    m = max(m, abs_bits(v));
  }
  if (record) warp_amax(m, state + kFp8Amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = state[kFp8ScaleInv];
}

// block (kTile, kTileRows): tile (bx, by) of x (R, C) (rows on x: up to 2^31 tiles); threads read
// rows r0 + ty + 8j, column c0 + tx
template <class T, __nv_fp8_interpretation_t F>
__global__ void cast_transpose_kernel(const T* x, uint8_t* q, uint8_t* qt, int64_t R, int64_t C, float* state,
                                      bool record, float* scale_inv) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float s = state[kFp8Scale];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t r = r0 + ty + j, c = c0 + tx;
    if (r < R && c < C) {
      const float v = to_float(x[r * C + c]);
      const uint8_t b = encode<F>(__fmul_rn(v, s));
      q[r * C + c] = b;
      tile[ty + j][tx] = b;
      m = max(m, abs_bits(v));
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t c = c0 + ty + j, r = r0 + tx;  // qt row c, column r
    if (r < R && c < C) qt[c * R + r] = tile[tx][ty + j];
  }
  if (record) warp_amax(m, state + kFp8Amax);
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) *scale_inv = state[kFp8ScaleInv];
}

__global__ void scale_current_kernel(float* state, float fmax, int margin, bool pow2) {
  const float s = fp8_scale_from_amax(state[kFp8Amax], state[kFp8Scale], fmax, margin, pow2);
  state[kFp8Scale] = s;
  state[kFp8ScaleInv] = __fdiv_rn(1.f, s);
}

// one block; dynamic shared memory: n floats
__global__ void update_kernel(float* state, int n, float fmax, int margin, bool pow2) {
  extern __shared__ float shifted[];
  __shared__ uint32_t warp_max[32];
  float* h = state + kFp8History;
  const float a = state[kFp8Amax];
  const bool push = __float_as_uint(a) < 0x7f800000u;  // finite (≥ 0 by construction)
  for (int i = threadIdx.x; i < n; i += blockDim.x) shifted[i] = push ? (i == 0 ? a : h[i - 1]) : h[i];
  __syncthreads();
  uint32_t m = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    h[i] = shifted[i];
    m = max(m, __float_as_uint(shifted[i]));
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = max(m, warp_max[w]);
    const float s = fp8_scale_from_amax(__uint_as_float(m), state[kFp8Scale], fmax, margin, pow2);
    state[kFp8Scale] = s;
    state[kFp8ScaleInv] = __fdiv_rn(1.f, s);
    state[kFp8Amax] = 0.f;
  }
}

template <class O, __nv_fp8_interpretation_t F>
__global__ void dequantize_kernel(const uint8_t* q, int64_t n, const float* scale_inv, O* out) {
  const float si = *scale_inv;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(q[i], F);  // exact: every fp8 value is an f16 value
    out[i] = from_float<O>(__fmul_rn(__half2float(__half(h)), si));
  }
}

template <class Fn>
void visit_fp8(DType t, Fn&& fn) {
  if (t == DType::f8e4m3) return fn(std::integral_constant<__nv_fp8_interpretation_t, __NV_E4M3>{});
  if (t == DType::f8e5m2) return fn(std::integral_constant<__nv_fp8_interpretation_t, __NV_E5M2>{});
  ST_THROW(DTypeError, "fp8: expected an f8e4m3 or f8e5m2 tensor, got " << dtype_name(t));
}

}  // namespace

void fp8_zero(float* p) { CHECK_CUDA(cudaMemsetAsync(p, 0, sizeof(float), current_stream())); }

void fp8_amax(const Tensor& x, float* amax) {
  check_contiguous_cuda("fp8_amax", {&x});
  const int64_t n = x.numel();
  if (n == 0) return;
  visit_float_dtype(x.dtype(), "fp8_amax", [&](auto tag) {
    using T = decltype(tag);
    amax_kernel<T><<<grid_for(n, kThreads, 4096), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), n, amax);
    CHECK_LAUNCH();
  });
}

void fp8_scale_current(float* state, const Fp8ScalingOptions& o) {
  scale_current_kernel<<<1, 1, 0, current_stream()>>>(state, fp8_max(o.format), o.margin, o.pow2);
  CHECK_LAUNCH();
}

void fp8_scaling_update(float* state, const Fp8ScalingOptions& o) {
  const int n = static_cast<int>(o.history);
  update_kernel<<<1, 1024, n * sizeof(float), current_stream()>>>(state, n, fp8_max(o.format), o.margin, o.pow2);
  CHECK_LAUNCH();
}

void fp8_cast(const Tensor& x, Tensor& q, Tensor& qt, float* state, bool record, float* scale_inv) {
  check_contiguous_cuda("fp8_quantize", {&x, &q, &qt});
  const int64_t R = x.size(0), C = x.size(1), n = R * C;
  cudaStream_t stream = current_stream();
  uint8_t* pq = static_cast<uint8_t*>(q.data_ptr());
  uint8_t* pqt = qt.defined() ? static_cast<uint8_t*>(qt.data_ptr()) : nullptr;
  if (n == 0) {  // nothing to cast; s⁻¹ is still reported
    CHECK_CUDA(cudaMemcpyAsync(scale_inv, state + kFp8ScaleInv, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  visit_float_dtype(x.dtype(), "fp8_quantize", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    visit_fp8(q.dtype(), [&](auto fmt) {
      constexpr __nv_fp8_interpretation_t F = decltype(fmt)::value;
      if (pqt) {
        ST_CHECK((R + kTile - 1) / kTile <= INT32_MAX && (C + kTile - 1) / kTile <= 65535, ShapeError,
                 "fp8_quantize: (" << R << ", " << C << ") is too large for the transposing cast");
        const dim3 grid(static_cast<unsigned>((R + kTile - 1) / kTile), static_cast<unsigned>((C + kTile - 1) / kTile));
        cast_transpose_kernel<T, F><<<grid, dim3(kTile, kTileRows), 0, stream>>>(px, pq, pqt, R, C, state, record,
                                                                                 scale_inv);
      } else {
        cast_kernel<T, F><<<grid_for(n, kThreads), kThreads, 0, stream>>>(px, pq, n, state, record, scale_inv);
      }
      CHECK_LAUNCH();
    });
  });
}

void fp8_dequantize(const Tensor& q, const float* scale_inv, Tensor& out) {
  check_contiguous_cuda("fp8_dequantize", {&q, &out});
  const int64_t n = q.numel();
  if (n == 0) return;
  visit_float_dtype(out.dtype(), "fp8_dequantize", [&](auto tag) {
    using O = decltype(tag);
    visit_fp8(q.dtype(), [&](auto fmt) {
      constexpr __nv_fp8_interpretation_t F = decltype(fmt)::value;
      dequantize_kernel<O, F><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
          static_cast<const uint8_t*>(q.data_ptr()), n, scale_inv, static_cast<O*>(out.data_ptr()));
      CHECK_LAUNCH();
    });
  });
}

}  // namespace st::ops::cuda
