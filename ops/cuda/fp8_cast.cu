// FP8 casts and amax on CUDA (ops/fp8_quantize.h, ops/fp8_scaling.h; the state's updates:
// ops/cuda/fp8_scaling.cu),
// every value as ops/cpu/fp8_cast.cpp computes it:
//   cast      q = cvt.rn.satfinite(x · s): __fmul_rn (one rounding, never contracted) then the
//             hardware conversion (sm_89+; two values an instruction, the same cvt.rn.satfinite
//             .e4m3x2/.e5m2x2.f32 that the one-value intrinsic issues), which rounds to nearest even
//             and saturates as tensor/dtype.h does (tests/gpu/test_gpu_fp8.cpp holds the two bit
//             for bit).
//   amax      max over |x|'s bit patterns (unsigned max: order-free, so bit-equal to the CPU's
//             loop): per block (warps by __reduce_max_sync, then the warps' maxima through shared
//             memory), then ONE atomicMax per block on the state's slot (none when the block's max
//             is 0): a few thousand same-address atomics a call at most, not one per warp.
//   the rule  fp8_scale_from_amax (ops/fp8_scaling.h), the same function on the host and the device.
//   counts    overflow / underflow of each x · s by the CPU's rule (ops/fp8_scaling.h's
//             Fp8RangeCount), in the packed paths only for a pack that may hold one (encode_pack:
//             one product of the pack's max |x| and a byte-wise zero test of its fp8 words, ~1.5
//             integer operations an element; the scalar paths count every element), summed per
//             block beside the amax (__reduce_add_sync, then the warps' sums through shared memory,
//             in the same barrier) and added with ONE 64-bit atomicAdd per block and counter (none
//             for 0) into the counts the caller gave (null: none). Order-free integer sums: the
//             CPU's counts exactly.
// Memory access: a "pack" is 16 bytes of x (N = 8 bf16 / f16 or 4 f32: st::cuda::Pack) loaded as
// one int4; its N fp8 bytes are stored as one N-byte word (uint2 / uint32). The launchers take the
// pack paths where the pointers and shapes allow and fall back to one element a thread otherwise
// (same values: the cast is elementwise, the amax a max).
// Kernels (256 threads a block):
//   amax_kernel        x (n) → *amax max= max |x|         packs from x's first 16-byte boundary
//                      (scalar head and tail); grid-stride, 4 packs in flight a thread, ≤ 4096 blocks
//   cast_kernel        x (n) → q (n), records amax        packs when x is 16-byte and q N-byte
//                      aligned (scalar tail), else one element a thread; grid-stride, ≤ 4096 blocks
//   cast_transpose_kernel         x (R, C) → q (R, C), qt (C, R), x read through a source (x itself,
//                      or an MLP activation computed as it loads: ops/cuda/fp8_cast_sources.cuh; SwiGLU's
//                      gradient gives both halves of a row from one read, each chunk stored
//                      twice, at c and C/2 + c): tiles of 256 rows × 8N columns,
//                      block 8 × 32; thread (tx, ty) converts the 8 × N chunk at rows 8ty …,
//                      columns N·tx …, a row at a time (its pack loaded, encoded, a flagged
//                      pack counted in place, N bytes stored to q), then its N columns
//                      transposed in registers (byte permutes, no shared memory) into N 8-byte qt
//                      stores. A warp (8 × 4 threads) reads 4 rows × 128 contiguous bytes a load,
//                      writes 4 rows × 8N bytes a q store and 8 qt rows × 32 contiguous bytes a qt
//                      store: whole 32-byte sectors throughout. Needs R % 8 = 0, C % N = 0, x
//                      16-byte, q N-byte and qt 8-byte aligned.
//   cast_transpose_scalar_kernel  the same for any shape: 32 × 32 tiles through shared memory
//                      (block 32 × 8, 4 rows a thread, one byte a store), reads and writes coalesced
//   dequantize_kernel     q (n) → out (n) = f32(q) · s⁻¹            grid-stride, one element a thread
// The s a cast multiplies by and the s⁻¹ it reports are read from the state in device memory by
// the kernel itself, so a captured CUDA graph replays them with the state's current values (the
// state's updates: ops/cuda/fp8_scaling.cu).
// Where the amax pass could go (current scaling reads x twice: amax_kernel, then the cast): of the
// tensors fp8_linear casts, these are written by kernels of ours, which could max-accumulate |y|
// into the scaling state's amax slot (block_amax below) as they store y: the norm outputs (qkv, up:
// ops/cuda/layernorm_rows.cuh), the GELU (down: ops/cuda/activation.cu through pointwise.cuh), and
// backward the residual gradient (o, down: add_layernorm's backward dx sink) and the GELU gradient
// (up). The attention output (o) and dqkv (qkv) are cuDNN's under the default backend
// (ops/attention_backend.h).
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/fp8_cast_sources.cuh"
#include "ops/fp8_quantize.h"

namespace st::ops::cuda {
namespace {

using st::cuda::aligned16;
using st::cuda::load_pack;
using st::cuda::Pack;
using namespace fp8_sources;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;           // grid-stride kernels: at most this many atomics a call
constexpr int kTile = 32, kTileRows = 8;        // scalar cast_transpose: 32 × 32 tile, 32 × 8 threads
constexpr int kCtRows = 8;                      // cast_transpose: rows a thread (one 8-byte qt store)
constexpr int kCtTx = 8, kCtTy = kThreads / kCtTx;  // its block: 8 column × 32 row threads
constexpr int64_t kCtTileRows = kCtTy * kCtRows;    // 256 rows a tile

template <__nv_fp8_interpretation_t F>
__device__ inline uint8_t encode(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, F));
}

// four values → four fp8 bytes, a in byte 0 (the same cvt as encode, two values an instruction)
template <__nv_fp8_interpretation_t F>
__device__ inline uint32_t encode4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, F);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, F);
  return lo | (hi << 16);
}

__device__ inline uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// The block's max of m and sums of n's overflow and underflow counts; thread 0 max-accumulates
// the max into *slot (a float's bits, ≥ 0; when slot is set) and adds the sums to counts[0],
// counts[1] (when counts is set): one atomic per block and destination, none for a max or a sum
// of 0. Every thread of the block calls it (it has a barrier; slot and counts are the kernel's
// arguments, the same for every thread); blocks of whole warps, ≤ 1024 threads. A block's sums
// fit 32 bits: a block converts far fewer than 2^32 elements (≤ 4096 blocks share any tensor of
// the grid-stride kernels; the tiled kernels convert ≤ 256 · 64 a block).
__device__ inline void block_finish(uint32_t m, float* slot, const Fp8RangeCount& n, int64_t* counts) {
  __shared__ uint32_t warp_max[32], warp_over[32], warp_under[32];
  const int t = threadIdx.x + threadIdx.y * blockDim.x, nwarps = (blockDim.x * blockDim.y) >> 5;
  uint32_t over = 0, under = 0;
  if (slot) m = __reduce_max_sync(0xffffffffu, m);
  if (counts) {
    over = __reduce_add_sync(0xffffffffu, n.over);
    under = __reduce_add_sync(0xffffffffu, n.under);
  }
  if ((t & 31) == 0) warp_max[t >> 5] = m, warp_over[t >> 5] = over, warp_under[t >> 5] = under;
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < nwarps; ++w) m = max(m, warp_max[w]), over += warp_over[w], under += warp_under[w];
    if (slot && m != 0) atomicMax(reinterpret_cast<unsigned int*>(slot), m);
    if (counts && over != 0) atomicAdd(reinterpret_cast<unsigned long long*>(counts), static_cast<unsigned long long>(over));
    if (counts && under != 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(counts + 1), static_cast<unsigned long long>(under));
  }
}

// The block's max of m into *slot (block_finish without counts)
__device__ inline void block_amax(uint32_t m, float* slot) { block_finish(m, slot, Fp8RangeCount{}, nullptr); }

// max |v| bits over a pack
template <class T>
__device__ inline uint32_t pack_amax(const Pack<T>& p) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < Pack<T>::N; ++k) m = max(m, abs_bits(to_float(p.v[k])));
  return m;
}

// the overflow / underflow bounds of format F (ops/fp8_scaling.h)
template <__nv_fp8_interpretation_t F>
__device__ constexpr Fp8RangeBits range_of() { return fp8_range_bits(F == __NV_E4M3); }

// the rare case of encode_pack: the pack counted element by element. The grid-stride casts run it
// after a group of packs is converted and stored, reading the pack again, so it holds none of
// their registers (inside the group, the bf16 cast_kernel measured 63 registers a thread against
// 32 by ptxas); the tiled cast counts the pack in place (its source may compute x: see there).
template <__nv_fp8_interpretation_t F, class T>
__device__ inline void count_pack(const Pack<T>& p, float s, Fp8RangeCount& n) {
#pragma unroll
  for (int i = 0; i < Pack<T>::N; ++i) {
    const float v = to_float(p.v[i]);
    n.add(abs_bits(v), abs_bits(__fmul_rn(v, s)), range_of<F>());
  }
}

// a pack's N fp8 bytes (x · s each) as N/4 words, byte j of word k = element 4k + j; m max= |x|.
// Returns whether the pack may hold an overflow or an underflow, at a few operations a pack, not
// an element: an element can overflow only if the pack's largest |x| does (|x|·s rounded is
// monotone in |x|, s > 0: one product of the pack's max), and underflow only where a byte is ±0
// (a byte-wise test of the words: (b & 0x7f) + 0x7f sets bit 7 exactly for a nonzero magnitude,
// no carry between bytes). A pack for which it returns true (a zero of x, an underflow, a
// saturation, inf or NaN: rare) is then counted by count_pack, by the CPU's own rule.
template <__nv_fp8_interpretation_t F, class T>
__device__ inline bool encode_pack(const Pack<T>& p, float s, uint32_t (&w)[Pack<T>::N / 4], uint32_t& m) {
  constexpr int N = Pack<T>::N;
  uint32_t pm = 0;            // the pack's max |x| bits
  uint32_t nz = 0x80808080u;  // bit 7 of byte j: byte j of every word has a nonzero magnitude
#pragma unroll
  for (int k = 0; k < N / 4; ++k) {
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float v = to_float(p.v[4 * k + j]);
      y[j] = __fmul_rn(v, s);
      pm = max(pm, abs_bits(v));
    }
    w[k] = encode4<F>(y[0], y[1], y[2], y[3]);
    nz &= (w[k] & 0x7f7f7f7fu) + 0x7f7f7f7fu;
  }
  m = max(m, pm);
  return abs_bits(__fmul_rn(__uint_as_float(pm), s)) > range_of<F>().overflow_above || nz != 0x80808080u;
}

// W words to q (4W-byte aligned)
template <int W>
__device__ inline void store_words(uint8_t* q, const uint32_t (&w)[W]) {
  static_assert(W == 1 || W == 2);
  if constexpr (W == 1)
    *reinterpret_cast<uint32_t*>(q) = w[0];
  else
    *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
}

// rows a, b, c, d of a 4 × 4 byte block (byte j of a word = column j) → col[j] = column j (byte i = row i)
__device__ inline void transpose4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t (&col)[4]) {
  const uint32_t ab01 = __byte_perm(a, b, 0x5140), ab23 = __byte_perm(a, b, 0x7362);  // a0 b0 a1 b1, a2 b2 a3 b3
  const uint32_t cd01 = __byte_perm(c, d, 0x5140), cd23 = __byte_perm(c, d, 0x7362);
  col[0] = __byte_perm(ab01, cd01, 0x5410);  // a0 b0 c0 d0
  col[1] = __byte_perm(ab01, cd01, 0x7632);
  col[2] = __byte_perm(ab23, cd23, 0x5410);
  col[3] = __byte_perm(ab23, cd23, 0x7632);
}

// f(pack, i) for the packs i of x (packs · N elements, 16-byte aligned) in this thread's grid-stride
// share (t0, t0 + stride, …), four 16-byte loads in flight. With `rare`: f returns a bool, and
// rare(i) runs for the packs it flagged after their group of four (their registers free by then).
template <class T, class Fn, class Rare = std::nullptr_t>
__device__ inline void for_each_pack(const T* x, int64_t packs, int64_t t0, int64_t stride, Fn&& f,
                                     Rare&& rare = nullptr) {
  constexpr int N = Pack<T>::N;
  constexpr bool flags = !std::is_null_pointer_v<std::decay_t<Rare>>;
  int64_t i = t0;
  for (; i + 3 * stride < packs; i += 4 * stride) {
    Pack<T> p[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) p[u] = load_pack(x + (i + u * stride) * N);
    if constexpr (flags) {
      uint32_t flagged = 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) flagged |= static_cast<uint32_t>(f(p[u], i + u * stride)) << u;
#pragma unroll 1
      for (int u = 0; u < 4; ++u)
        if ((flagged >> u) & 1u) rare(i + u * stride);
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) f(p[u], i + u * stride);
    }
  }
  for (; i < packs; i += stride) {
    if constexpr (flags) {
      if (f(load_pack(x + i * N), i)) rare(i);
    } else {
      f(load_pack(x + i * N), i);
    }
  }
}

// x (n): elements [head, head + packs·N) as packs (x + head 16-byte aligned), the others one by one
template <class T>
__global__ void __launch_bounds__(kThreads) amax_kernel(const T* x, int64_t n, int64_t head, int64_t packs,
                                                        float* amax) {
  constexpr int N = Pack<T>::N;
  const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  uint32_t m = 0;
  for_each_pack(x + head, packs, t0, stride, [&](const Pack<T>& p, int64_t) { m = max(m, pack_amax(p)); });
  const int64_t end = head + packs * N, rest = head + (n - end);  // [0, head) and [end, n)
  for (int64_t j = t0; j < rest; j += stride) m = max(m, abs_bits(to_float(x[j < head ? j : end + (j - head)])));
  block_amax(m, amax);
}

// x (n) → q (n): elements [0, packs·N) as packs (x 16-byte, q N-byte aligned), [packs·N, n) one by one
template <class T, __nv_fp8_interpretation_t F>
__global__ void __launch_bounds__(kThreads) cast_kernel(const T* x, uint8_t* q, int64_t n, int64_t packs,
                                                        float* state, bool record, float* scale_inv,
                                                        int64_t* counts) {
  constexpr int N = Pack<T>::N;
  const float s = state[kFp8Scale];
  const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  uint32_t m = 0;
  Fp8RangeCount c;
  for_each_pack(
      x, packs, t0, stride,
      [&](const Pack<T>& p, int64_t i) {
        uint32_t w[N / 4];
        const bool rare = encode_pack<F>(p, s, w, m);
        store_words(q + i * N, w);
        return rare;
      },
      [&](int64_t i) { count_pack<F>(load_pack(x + i * N), s, c); });
  for (int64_t j = packs * N + t0; j < n; j += stride) {
    const float v = to_float(x[j]), y = __fmul_rn(v, s);
    q[j] = encode<F>(y);
    m = max(m, abs_bits(v));
    c.add(abs_bits(v), abs_bits(y), range_of<F>());
  }
  if (record || counts) block_finish(m, record ? state + kFp8Amax : nullptr, c, counts);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = state[kFp8ScaleInv];
}

// block (kCtTx, kCtTy), tile (bx, by) of x (R, C) = src: rows 256·bx …, columns 8N·by … (rows on x: up to
// 2^31 tiles). R % 8 = 0 and C % N = 0, so a thread's 8 × N chunk is wholly inside x or outside.
// A source of H = 2 halves gives the chunk at columns c and C/2 + c from one read (the tiles span
// C/2 columns; (C/2) % N = 0).
// kSum: also the tile's column sums into part (tiles_r, C) f32 — each thread its chunk's 8 rows,
// then the tile's chunks in order (ops/fp8_quantize.h's order; colsum_reduce_kernel sums the tiles).
template <class T, __nv_fp8_interpretation_t F, bool kSum, class Src>
__global__ void __launch_bounds__(kThreads) cast_transpose_kernel(Src src, uint8_t* q, uint8_t* qt, int64_t R,
                                                                  int64_t C, float* state, bool record,
                                                                  float* scale_inv, int64_t* counts, float* part) {
  constexpr int N = Pack<T>::N, W = N / 4, H = src_halves<Src>::value;
  static_assert(kCtRows == kFp8SumChunkRows && kCtTy == kFp8SumTileChunks, "the column sums' order is the tile's");
  const float s = state[kFp8Scale];
  const int64_t CH = C / H;                                                      // a half's columns
  const int64_t r = blockIdx.x * kCtTileRows + threadIdx.y * kCtRows;            // the chunk's first row
  const int64_t c = static_cast<int64_t>(blockIdx.y) * (kCtTx * N) + threadIdx.x * N;  // and column (of its half)
  uint32_t m = 0;
  Fp8RangeCount cnt;
  float cs[H][kSum ? N : 1] = {};  // the chunk's column sums (kSum)
  if (r < R && c < CH) {
    uint32_t w[H][kCtRows][W];  // row i of the chunk's half h: N fp8 bytes
#pragma unroll
    for (int i = 0; i < kCtRows; ++i) {  // a row at a time: only its packs and the words live
      Pack<T> p[H];
      load_src(src, r + i, c, p);
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if constexpr (kSum) {
#pragma unroll
          for (int j = 0; j < N; ++j) cs[h][j] = __fadd_rn(cs[h][j], to_float(p[h].v[j]));
        }
        // a pack that may hold an overflow or underflow is counted here, from its registers: a
        // gradient's underflows flag some pack of nearly every warp, and counting after the stores
        // re-ran the source for the warp (a SwiGLU gradient's cast took 3× its traffic's time)
        if (encode_pack<F>(p[h], s, w[h][i], m)) count_pack<F>(p[h], s, cnt);
        store_words(q + (r + i) * C + h * CH + c, w[h][i]);
      }
    }
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int k = 0; k < W; ++k) {  // columns c + 4k … c + 4k + 3 of half h
        uint32_t lo[4], hi[4];       // rows 0–3 and 4–7 of each
        transpose4x4(w[h][0][k], w[h][1][k], w[h][2][k], w[h][3][k], lo);
        transpose4x4(w[h][4][k], w[h][5][k], w[h][6][k], w[h][7][k], hi);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          *reinterpret_cast<uint2*>(qt + (h * CH + c + 4 * k + j) * R + r) = make_uint2(lo[j], hi[j]);
      }
  }
  if constexpr (kSum) {  // per half, the tile's chunks in order, by the first kCtTx·N threads (one column each)
    __shared__ float sums[kCtTy][kCtTx * N];
    const int t = threadIdx.y * kCtTx + threadIdx.x;
    const int64_t col = static_cast<int64_t>(blockIdx.y) * (kCtTx * N) + t;
    const int64_t rows = R - static_cast<int64_t>(blockIdx.x) * kCtTileRows;  // the tile's rows (R % 8 = 0)
    const int chunks = static_cast<int>(rows < kCtTileRows ? rows / kCtRows : kCtTy);
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (h > 0) __syncthreads();  // the last half's sums read
#pragma unroll
      for (int j = 0; j < N; ++j) sums[threadIdx.y][threadIdx.x * N + j] = cs[h][j];
      __syncthreads();
      if (t < kCtTx * N && col < CH) {
        float acc = 0.f;
        for (int y = 0; y < chunks; ++y) acc = __fadd_rn(acc, sums[y][t]);
        part[static_cast<int64_t>(blockIdx.x) * C + h * CH + col] = acc;
      }
    }
  }
  if (record || counts) block_finish(m, record ? state + kFp8Amax : nullptr, cnt, counts);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = state[kFp8ScaleInv];
}

// out (C) = the tiles' column sums part (tiles, C) in order, from 0; one thread a column
__global__ void colsum_reduce_kernel(const float* part, int64_t tiles, int64_t C, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t t = 0; t < tiles; ++t) acc = __fadd_rn(acc, part[t * C + c]);
  out[c] = acc;
}

// out (C) = Σ over the R rows of x (R, C) in ops/fp8_quantize.h's order, one thread a column (any
// shape: beside the other casts)
template <class T>
__global__ void colsum_kernel(const T* x, int64_t R, int64_t C, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c < C) out[c] = fp8_column_sum(R, [&](int64_t r) { return to_float(x[r * C + c]); });
}

// block (kTile, kTileRows): tile (bx, by) of x (R, C) (rows on x: up to 2^31 tiles); threads read
// rows r0 + ty + 8j, column c0 + tx
template <class T, __nv_fp8_interpretation_t F>
__global__ void cast_transpose_scalar_kernel(const T* x, uint8_t* q, uint8_t* qt, int64_t R, int64_t C,
                                             float* state, bool record, float* scale_inv, int64_t* counts) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float s = state[kFp8Scale];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  uint32_t m = 0;
  Fp8RangeCount cnt;
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t r = r0 + ty + j, c = c0 + tx;
    if (r < R && c < C) {
      const float v = to_float(x[r * C + c]), y = __fmul_rn(v, s);
      const uint8_t b = encode<F>(y);
      q[r * C + c] = b;
      tile[ty + j][tx] = b;
      m = max(m, abs_bits(v));
      cnt.add(abs_bits(v), abs_bits(y), range_of<F>());
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t c = c0 + ty + j, r = r0 + tx;  // qt row c, column r
    if (r < R && c < C) qt[c * R + r] = tile[tx][ty + j];
  }
  if (record || counts) block_finish(m, record ? state + kFp8Amax : nullptr, cnt, counts);
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) *scale_inv = state[kFp8ScaleInv];
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

void fp8_amax(const Tensor& x, float* amax) {
  check_contiguous_cuda("fp8_amax", {&x});
  const int64_t n = x.numel();
  if (n == 0) return;
  visit_float_dtype(x.dtype(), "fp8_amax", [&](auto tag) {
    using T = decltype(tag);
    constexpr int64_t N = Pack<T>::N;
    const T* px = static_cast<const T*>(x.data_ptr());
    // packs from x's first 16-byte boundary (a T-aligned x reaches one within N − 1 elements)
    const uintptr_t a = reinterpret_cast<uintptr_t>(px);
    const int64_t head = a % sizeof(T) ? n : std::min<int64_t>(n, ((16 - (a & 15)) & 15) / sizeof(T));
    const int64_t packs = (n - head) / N, units = packs + (n - packs * N);  // threads' work items
    amax_kernel<T><<<grid_for(units, kThreads * 4, kMaxBlocks), kThreads, 0, current_stream()>>>(px, n, head, packs,
                                                                                                 amax);
    CHECK_LAUNCH();
  });
}

namespace {

// Whether the packed transposing cast takes x (R, C) of T (at px) → q, qt
template <class T>
bool packed_transpose_fits(const void* px, const void* pq, const void* pqt, int64_t R, int64_t C) {
  constexpr int64_t N = Pack<T>::N;
  auto aligned = [](const void* p, uintptr_t b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
  return pqt && R % kCtRows == 0 && C % N == 0 && aligned16(px) && aligned(pq, N) && aligned(pqt, 8);
}

// The packed transposing cast of x (R, C) = src (packed_transpose_fits), with the column sums
// when column_sums is set
template <class T, __nv_fp8_interpretation_t F, class Src>
void launch_cast_transpose(const Src& src, uint8_t* pq, uint8_t* pqt, int64_t R, int64_t C, float* state, bool record,
                           float* scale_inv, int64_t* counts, float* column_sums, Device device, cudaStream_t stream) {
  constexpr int64_t N = Pack<T>::N, H = src_halves<Src>::value;  // the tiles span a half: C / H columns
  const int64_t tiles_r = (R + kCtTileRows - 1) / kCtTileRows, tiles_c = (C / H + kCtTx * N - 1) / (kCtTx * N);
  ST_CHECK(tiles_r <= INT32_MAX && tiles_c <= 65535, ShapeError,
           "fp8_quantize: (" << R << ", " << C << ") is too large for the transposing cast");
  const dim3 grid(static_cast<unsigned>(tiles_r), static_cast<unsigned>(tiles_c));
  if (column_sums) {
    Tensor part = Tensor::empty({tiles_r, C}, DType::f32, device);  // (tiles_r, C) the tiles' sums
    cast_transpose_kernel<T, F, true><<<grid, dim3(kCtTx, kCtTy), 0, stream>>>(src, pq, pqt, R, C, state, record,
                                                                               scale_inv, counts, part.data<float>());
    CHECK_LAUNCH();
    colsum_reduce_kernel<<<grid_for(C, kThreads), kThreads, 0, stream>>>(part.data<float>(), tiles_r, C, column_sums);
  } else {
    cast_transpose_kernel<T, F, false><<<grid, dim3(kCtTx, kCtTy), 0, stream>>>(src, pq, pqt, R, C, state, record,
                                                                                scale_inv, counts, nullptr);
  }
  CHECK_LAUNCH();
}

}  // namespace

void fp8_cast(const Tensor& x, Tensor& q, Tensor& qt, float* state, bool record, float* scale_inv, int64_t* counts,
              float* column_sums) {
  check_contiguous_cuda("fp8_quantize", {&x, &q, &qt});
  const int64_t R = x.size(0), C = x.size(1), n = R * C;
  cudaStream_t stream = current_stream();
  uint8_t* pq = static_cast<uint8_t*>(q.data_ptr());
  uint8_t* pqt = qt.defined() ? static_cast<uint8_t*>(qt.data_ptr()) : nullptr;
  if (n == 0) {  // nothing to cast; s⁻¹ is still reported
    CHECK_CUDA(cudaMemcpyAsync(scale_inv, state + kFp8ScaleInv, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    if (column_sums && C > 0) CHECK_CUDA(cudaMemsetAsync(column_sums, 0, C * sizeof(float), stream));
    return;
  }
  bool sum_columns = column_sums != nullptr;  // still to do
  visit_float_dtype(x.dtype(), "fp8_quantize", [&](auto tag) {
    using T = decltype(tag);
    constexpr int64_t N = Pack<T>::N;
    const T* px = static_cast<const T*>(x.data_ptr());
    auto aligned = [](const void* p, uintptr_t b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
    visit_fp8(q.dtype(), [&](auto fmt) {
      constexpr __nv_fp8_interpretation_t F = decltype(fmt)::value;
      if (packed_transpose_fits<T>(px, pq, pqt, R, C)) {
        launch_cast_transpose<T, F>(PlainSrc<T>{px, C}, pq, pqt, R, C, state, record, scale_inv, counts, column_sums,
                                    x.device(), stream);
        sum_columns = false;  // done by the cast
      } else if (pqt) {  // any shape or alignment: one element a thread
        ST_CHECK((R + kTile - 1) / kTile <= INT32_MAX && (C + kTile - 1) / kTile <= 65535, ShapeError,
                 "fp8_quantize: (" << R << ", " << C << ") is too large for the transposing cast");
        const dim3 grid(static_cast<unsigned>((R + kTile - 1) / kTile), static_cast<unsigned>((C + kTile - 1) / kTile));
        cast_transpose_scalar_kernel<T, F><<<grid, dim3(kTile, kTileRows), 0, stream>>>(px, pq, pqt, R, C, state,
                                                                                        record, scale_inv, counts);
        CHECK_LAUNCH();
      } else {
        const int64_t packs = aligned16(px) && aligned(pq, N) ? n / N : 0, units = packs + (n - packs * N);
        cast_kernel<T, F><<<grid_for(units, kThreads * 4, kMaxBlocks), kThreads, 0, stream>>>(px, pq, n, packs, state,
                                                                                              record, scale_inv, counts);
        CHECK_LAUNCH();
      }
      if (sum_columns) {  // not summed by the cast above
        colsum_kernel<T><<<grid_for(C, kThreads), kThreads, 0, stream>>>(px, R, C, column_sums);
        CHECK_LAUNCH();
      }
    });
  });
}

bool fp8_cast_act(Fp8Act act, const Tensor& pre, const Tensor& dy, Tensor& q, Tensor& qt, float* state, bool record,
                  float* scale_inv, int64_t* counts, float* column_sums) {
  check_contiguous_cuda("fp8_quantize_act", {&pre, &dy, &q, &qt});
  const int64_t R = q.size(0), C = q.size(1);  // x's shape
  if (R * C == 0) return false;
  bool done = false;
  visit_float_dtype(pre.dtype(), "fp8_quantize_act", [&](auto tag) {
    using T = decltype(tag);
    const T* pp = static_cast<const T*>(pre.data_ptr());
    const T* pd = dy.defined() ? static_cast<const T*>(dy.data_ptr()) : nullptr;
    uint8_t* pq = static_cast<uint8_t*>(q.data_ptr());
    uint8_t* pqt = qt.defined() ? static_cast<uint8_t*>(qt.data_ptr()) : nullptr;
    const int64_t F = pre.size(1) / 2;  // swiglu's half width
    if (!packed_transpose_fits<T>(pp, pq, pqt, R, C) || (fp8_act_is_grad(act) && !aligned16(pd)) ||
        (fp8_act_is_swiglu(act) && F % Pack<T>::N != 0))
      return;
    visit_fp8(q.dtype(), [&](auto fmt) {
      constexpr __nv_fp8_interpretation_t F8 = decltype(fmt)::value;
      auto launch = [&](const auto& src) {
        launch_cast_transpose<T, F8>(src, pq, pqt, R, C, state, record, scale_inv, counts, column_sums, pre.device(),
                                     current_stream());
      };
      switch (act) {
        case Fp8Act::gelu: return launch(GeluSrc<T>{pp, C});
        case Fp8Act::gelu_grad: return launch(GeluGradSrc<T>{pp, pd, C});
        case Fp8Act::swiglu: return launch(SwigluSrc<T>{pp, F});
        case Fp8Act::swiglu_grad: return launch(SwigluGradSrc<T>{pp, pd, F});
      }
    });
    done = true;
  });
  return done;
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
