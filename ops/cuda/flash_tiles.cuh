// Tensor-core building blocks of the flash attention kernels (ops/cuda/flash_attention.cu), head
// dim 64, f16/bf16: PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 with f32 accumulation),
// 64-row tiles in shared memory in a XOR-swizzled layout (16-byte chunk c of row r stored at chunk
// c ^ (r & 7), so that ldmatrix reads are conflict-free), the warp-level products on them, and the
// rotary embedding of a tile in place and of an accumulator in registers (ops/cuda/rope.cuh).
// Fragment layouts (lane = 4g + t): A regs {(g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)} (pairs),
// B regs {(k 2t, n g), (k 2t+8, n g)}, C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/rope.cuh"

namespace st::ops::cuda::flash {

constexpr int kD = kFlashHeadDim, kTile = 64, kThreads = 128, kTileElems = kTile * kD;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kScale = 0.125f;  // 1/√64

template <class T>
struct Operand {  // typed AttnOperand
  T* p;
  int64_t sb, sh, st;
  __device__ T* at(int64_t b, int64_t h) const { return p + b * sb + h * sh; }
};
template <class T>
Operand<T> typed(const AttnOperand& o) {
  return {static_cast<T*>(o.ptr), o.sb, o.sh, o.st};
}

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ inline void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldsm4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c (16×8 f32) += a (16×16) · b (16×8)
template <class T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two floats → one register of two 16-bit values (lo = first), rounded to nearest even
template <class T>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// ---- shared tiles -----------------------------------------------------------------------------

// element offset of (row r, 16-byte chunk c) in a swizzled 64 × 64 tile
__device__ inline int swz(int r, int c) { return r * kD + ((c ^ (r & 7)) << 3); }

// rows [row0, row0 + Rows) of a (T, 64) operand with row stride st → tile; rows ≥ T zero-filled
template <class T, int Rows = kTile>
__device__ inline void load_tile(T* tile, const T* g, int64_t st, int64_t row0, int64_t Tn) {
#pragma unroll
  for (int i = threadIdx.x; i < Rows * 8; i += kThreads) {
    const int r = i >> 3, c = i & 7;
    const bool ok = row0 + r < Tn;
    cp_async16(tile + swz(r, c), ok ? g + (row0 + r) * st + c * 8 : g, ok);
  }
}

// A fragments of the warp's 16 rows (row0 within the tile) over the 64 columns: a[kc] for k-chunk kc
template <class T>
__device__ inline void load_a(uint32_t (&a)[4][4], const T* tile, int row0) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) ldsm4(a[kc], tile + swz(row0 + (lane & 15), kc * 2 + (lane >> 4)));
}

// The products below take MT row tiles of 16 (a warp owning 16·MT rows): every B fragment read
// from shared memory feeds MT tensor-core products.

// acc[m][j] (16 × 8, n-tile j of 64 columns) += a[m] (16 × 64) · tileᵀ: B(k = d, n = row j·8 + i) = tile[row][d]
template <int MT, class T>
__device__ inline void mma_abt(float (&acc)[MT][8][4], const uint32_t (&a)[MT][4][4], const T* tile) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t b[4];
      ldsm4(b, tile + swz(j * 8 + (lane & 7), p * 4 + (lane >> 3)));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma<T>(acc[m][j], a[m][2 * p], b[0], b[1]);
        mma<T>(acc[m][j], a[m][2 * p + 1], b[2], b[3]);
      }
    }
}

// acc[m][j] (16 × 8, n-tile j over d) += a[m] (16 × 64 rows of the tile as k) · tile: B(k = row, n = d)
template <int MT, class T>
__device__ inline void mma_ab(float (&acc)[MT][8][4], const uint32_t (&a)[MT][4][4], const T* tile) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t b[4];
      ldsm4_t(b, tile + swz(kc * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), 2 * q + (lane >> 4)));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma<T>(acc[m][2 * q], a[m][kc], b[0], b[1]);
        mma<T>(acc[m][2 * q + 1], a[m][kc], b[2], b[3]);
      }
    }
}

// one row tile (the backward kernels' warps own 16 rows)
template <class T>
__device__ inline void mma_abt(float (&acc)[8][4], const uint32_t (&a)[4][4], const T* tile) {
  mma_abt<1, T>(reinterpret_cast<float(&)[1][8][4]>(acc), reinterpret_cast<const uint32_t(&)[1][4][4]>(a), tile);
}
template <class T>
__device__ inline void mma_ab(float (&acc)[8][4], const uint32_t (&a)[4][4], const T* tile) {
  mma_ab<1, T>(reinterpret_cast<float(&)[1][8][4]>(acc), reinterpret_cast<const uint32_t(&)[1][4][4]>(a), tile);
}

// accumulator (16 × 64 f32) → A fragments (16 × 64 as k) in T
template <class T>
__device__ inline void to_a(uint32_t (&a)[4][4], const float (&c)[8][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    a[kc][0] = pack2<T>(c[2 * kc][0], c[2 * kc][1]);
    a[kc][1] = pack2<T>(c[2 * kc][2], c[2 * kc][3]);
    a[kc][2] = pack2<T>(c[2 * kc + 1][0], c[2 * kc + 1][1]);
    a[kc][3] = pack2<T>(c[2 * kc + 1][2], c[2 * kc + 1][3]);
  }
}

// the warp's 16 × 64 accumulator · s → rows [row0, row0 + 16) of a (T, 64) operand (rows ≥ T skipped)
template <class T>
__device__ inline void store_rows(T* g, int64_t st, int64_t row0, int64_t Tn, const float (&c)[8][4], float s) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + gr + 8 * r;
    if (row >= Tn) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<uint32_t*>(g + row * st + j * 8 + 2 * tq) = pack2<T>(c[j][2 * r] * s, c[j][2 * r + 1] * s);
  }
}

// rows [row0, row0 + 16) of an f32 (T, 64) accumulator with row stride st (even, 8-byte aligned)
// += the warp's 16 × 64 accumulator · s (rows ≥ T skipped); each element has one owner thread
__device__ inline void add_rows_f32(float* g, int64_t st, int64_t row0, int64_t Tn, const float (&c)[8][4], float s) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + gr + 8 * r;
    if (row >= Tn) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float2* p = reinterpret_cast<float2*>(g + row * st + j * 8 + 2 * tq);
      float2 v = *p;
      v.x += c[j][2 * r] * s;
      v.y += c[j][2 * r + 1] * s;
      *p = v;
    }
  }
}

// ---- rotary embedding ---------------------------------------------------------------------------

// Rows [row0, row0 + Rows) of a swizzled (Rows, 64) tile rotated in place, row r at position
// rope.offset + row0 + r (rows ≥ T, zero-filled, are left). Element d < 32 of a row sits in chunk
// d / 8 and its partner d + 32 in chunk d / 8 + 4. The caller syncs before (the tile has landed)
// and after (before ldmatrix reads it).
template <class T, int Rows>
__device__ inline void rope_tile(T* tile, int64_t row0, int64_t Tn, const AttnRope& rope) {
  constexpr int kHalf = kD / 2;
  for (int i = threadIdx.x; i < Rows * kHalf; i += kThreads) {
    const int r = i / kHalf, d = i % kHalf;
    if (row0 + r >= Tn) continue;
    T* lo = tile + swz(r, d >> 3) + (d & 7);
    T* hi = tile + swz(r, (d >> 3) + 4) + (d & 7);
    float x = to_float(*lo), y = to_float(*hi), c, s;
    rope_cs<T>(rope, rope.offset + row0 + r, d, kHalf, c, s);
    rope_rotate<T>(x, y, c, s);
    *lo = from_float<T>(x);  // already a T value: exact
    *hi = from_float<T>(y);
  }
}

// The warp's 16 × 64 accumulator of rows [row0, row0 + 16), a gradient with respect to roped rows,
// turned back (Rᵀ) in registers: columns d and d + 32 of a row are n-tiles j and j + 4 of one thread.
template <class T>
__device__ inline void rope_back_acc(float (&c)[8][4], int64_t row0, int64_t Tn, const AttnRope& rope) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + gr + 8 * r;
    if (row >= Tn) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) {
        float cs, sn;
        rope_cs<T>(rope, rope.offset + row, j * 8 + 2 * tq + (e & 1), kD / 2, cs, sn);
        rope_unrotate(c[j][e], c[j + 4][e], cs, sn);
      }
  }
}

}  // namespace st::ops::cuda::flash
