// Causal flash attention for f16/bf16, head dim 64, on mma.sync m16n8k16 tensor-core instructions
// with f32 accumulation. Blocks of 4 warps own 64 rows, 16 per warp (the forward: 128 rows, 32 per
// warp); 64-row tiles of the other operands stream through shared memory with cp.async, double buffered, in a XOR-swizzled layout
// (16-byte chunk c of row r stored at chunk c ^ (r & 7)) so that ldmatrix reads are conflict-free.
// Accumulators and the probabilities stay in registers: the m16n8 f32 accumulator layout of
// S = Q·Kᵀ, rounded to pairs of 16-bit values, is the A-operand layout of the next product P·V.
//   fwd:   per query block, over key tiles s ≤ t: S, online softmax (running max m and sum l per
//          row, in base-2 exponent), O += P·V; out = O / l, lse = m/8 + ln l. Never writes T×T.
//   dq:    per query block, over key tiles: P = exp(S − lse), dP = dO·Vᵀ, dS = P ∘ (dP − Δ),
//          dQ += dS·K.
//   dkdv:  per key block, over query tiles t ≥ s: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q.
// Fragment layouts (lane = 4g + t): A regs {(g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)} (pairs),
// B regs {(k 2t, n g), (k 2t+8, n g)}, C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"

namespace st::ops::cuda {
namespace {

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

template <class T>
struct Args {
  Operand<const T> q, k, v, o, dout;
  Operand<T> out, dq, dk, dv;
  const float* lse_in;
  const float* delta;
  float* delta_out;  // the Δ kernel's output (= delta)
  float* lse;
  int64_t H, Tn;
};

// kernels

// Forward: blocks of 4 warps own 64·MT query rows, each warp 16·MT (MT 16-row tiles, so every K/V
// fragment read from shared memory feeds MT products); key tiles of 64. MT = 2 (242 registers,
// 2 blocks per SM) measured 0.159 ms against 0.173 ms for MT = 1 at B 16 H 12 T 1024 on the H200;
// the same change made the dQ kernel slower (0.244 against 0.200 ms: registers spilled), so the
// backward keeps 16 rows per warp.
constexpr int kFwdMT = 2;

template <class T, int MT>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(Args<T> a) {
  constexpr int kFwdRows = 64 * MT;
  __shared__ alignas(16) T sQ[kFwdRows * kD], sK[2][kTileElems], sV[2][kTileElems];  // 48 KB at MT = 2
  const int qb = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, Tn = a.Tn, q0 = int64_t(qb) * kFwdRows;
  const T *q = a.q.at(b, h), *k = a.k.at(b, h), *v = a.v.at(b, h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const int64_t w0 = q0 + warp * 16 * MT;  // the warp's first query row
  // key tiles up to the one holding the block's last row (and below T)
  const int last = static_cast<int>(((q0 + kFwdRows < Tn ? q0 + kFwdRows : Tn) - 1) / kTile);
  load_tile<T, kFwdRows>(sQ, q, a.q.st, q0, Tn);
  load_tile(sK[0], k, a.k.st, 0, Tn);
  load_tile(sV[0], v, a.v.st, 0, Tn);
  cp_async_commit();

  uint32_t qf[MT][4][4];
  float o[MT][8][4] = {}, m[MT][2], l[MT][2] = {};
#pragma unroll
  for (int i = 0; i < MT; ++i) m[i][0] = m[i][1] = -INFINITY;
  const float sl2 = kScale * kLog2e;
  for (int kt = 0; kt <= last; ++kt) {
    const int buf = kt & 1;
    if (kt < last) {
      load_tile(sK[buf ^ 1], k, a.k.st, int64_t(kt + 1) * kTile, Tn);
      load_tile(sV[buf ^ 1], v, a.v.st, int64_t(kt + 1) * kTile, Tn);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kt == 0)
#pragma unroll
      for (int i = 0; i < MT; ++i) load_a(qf[i], sQ, warp * 16 * MT + 16 * i);

    const int64_t k0 = int64_t(kt) * kTile;
    if (k0 <= w0 + 16 * MT - 1) {  // else every key of the tile is after every row of the warp
      float s[MT][8][4] = {};
      mma_abt<MT, T>(s, qf, sK[buf]);
      if (k0 + kTile - 1 > w0)  // some key after some row: mask key > row
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (k0 + j * 8 + 2 * tq + (e & 1) > w0 + 16 * i + gr + 8 * (e >> 1)) s[i][j][e] = -INFINITY;
      uint32_t pf[MT][4][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = m[i][r];
#pragma unroll
          for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // key 0 ≤ every row is in tile 0, so mx is finite from the first tile on
          const float alpha = exp2f((m[i][r] - mx) * sl2), off = mx * sl2;  // m = −inf at first: alpha 0
          m[i][r] = mx;
          l[i][r] *= alpha;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            o[i][j][2 * r] *= alpha;
            o[i][j][2 * r + 1] *= alpha;
            s[i][j][2 * r] = exp2f(fmaf(s[i][j][2 * r], sl2, -off));
            s[i][j][2 * r + 1] = exp2f(fmaf(s[i][j][2 * r + 1], sl2, -off));
            l[i][r] += s[i][j][2 * r] + s[i][j][2 * r + 1];
          }
        }
        to_a<T>(pf[i], s[i]);
      }
      mma_ab<MT, T>(o, pf, sV[buf]);
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

#pragma unroll
  for (int i = 0; i < MT; ++i) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 1);
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 2);
      inv[r] = 1.f / l[i][r];
      const int64_t row = w0 + 16 * i + gr + 8 * r;
      if (tq == 0 && row < Tn) a.lse[bh * Tn + row] = m[i][r] * kScale + logf(l[i][r]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[i][j][0] *= inv[0];
      o[i][j][1] *= inv[0];
      o[i][j][2] *= inv[1];
      o[i][j][3] *= inv[1];
    }
    store_rows(a.out.at(b, h), a.out.st, w0 + 16 * i, Tn, o[i], 1.f);
  }
}

// Δ (B·H, T) = rowsum(dout ∘ out) in f32: 8 lanes per row, one 16-byte pack of 8 values each
constexpr int kDeltaRows = 32;  // rows per 256-thread block
template <class T>
__global__ void __launch_bounds__(8 * kDeltaRows) flash_delta_kernel(Args<T> a) {
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
  const int64_t t = int64_t(blockIdx.x) * kDeltaRows + (threadIdx.x >> 3);
  const int j = threadIdx.x & 7;  // pack j: columns 8j .. 8j + 7
  float s = 0.f;
  if (t < a.Tn) {
    const st::cuda::Pack<T> g = st::cuda::load_pack(a.dout.at(b, h) + t * a.dout.st + 8 * j);
    const st::cuda::Pack<T> o = st::cuda::load_pack(a.o.at(b, h) + t * a.o.st + 8 * j);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(to_float(g.v[e]), to_float(o.v[e]), s);
  }
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (j == 0 && t < a.Tn) a.delta_out[bh * a.Tn + t] = s;
}

template <class T>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq_kernel(Args<T> a) {
  __shared__ alignas(16) T sQ[kTileElems], sG[kTileElems], sK[2][kTileElems], sV[2][kTileElems];  // 48 KB
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, Tn = a.Tn, q0 = int64_t(qb) * kTile;
  const T *k = a.k.at(b, h), *v = a.v.at(b, h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  load_tile(sQ, a.q.at(b, h), a.q.st, q0, Tn);
  load_tile(sG, a.dout.at(b, h), a.dout.st, q0, Tn);
  load_tile(sK[0], k, a.k.st, 0, Tn);
  load_tile(sV[0], v, a.v.st, 0, Tn);
  cp_async_commit();

  float lse2[2], dlt[2];  // per row: lse·log2 e, Δ
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = q0 + warp * 16 + gr + 8 * r;
    lse2[r] = row < Tn ? a.lse_in[bh * Tn + row] * kLog2e : 0.f;
    dlt[r] = row < Tn ? a.delta[bh * Tn + row] : 0.f;
  }
  uint32_t qf[4][4], gf[4][4];
  float dq[8][4] = {};
  const float sl2 = kScale * kLog2e;
  for (int kt = 0; kt <= qb; ++kt) {
    const int buf = kt & 1;
    if (kt < qb) {
      load_tile(sK[buf ^ 1], k, a.k.st, int64_t(kt + 1) * kTile, Tn);
      load_tile(sV[buf ^ 1], v, a.v.st, int64_t(kt + 1) * kTile, Tn);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kt == 0) {
      load_a(qf, sQ, warp * 16);
      load_a(gf, sG, warp * 16);
    }
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<T>(s, qf, sK[buf]);
    mma_abt<T>(dp, gf, sV[buf]);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const bool masked = kt == qb && j * 8 + 2 * tq + (e & 1) > warp * 16 + gr + 8 * r;
        const float p = masked ? 0.f : exp2f(fmaf(s[j][e], sl2, -lse2[r]));
        s[j][e] = p * (dp[j][e] - dlt[r]);  // dS
      }
    uint32_t dsf[4][4];
    to_a<T>(dsf, s);
    mma_ab<T>(dq, dsf, sK[buf]);
    __syncthreads();
  }
  store_rows(a.dq.at(b, h), a.dq.st, q0 + warp * 16, Tn, dq, kScale);
}

// dynamic shared memory of the dkdv kernel: K, V, 2 × (Q, dO) tiles, 2 × (lse, Δ) rows
constexpr size_t kDkdvSmem = 6 * kTileElems * 2 + 4 * kTile * sizeof(float);

template <class T>
__global__ void __launch_bounds__(kThreads, 3) flash_bwd_dkdv_kernel(Args<T> a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kTileElems;
  T* sQ = sV + kTileElems;         // [2][kTileElems]
  T* sG = sQ + 2 * kTileElems;     // [2][kTileElems]
  float* sL = reinterpret_cast<float*>(sG + 2 * kTileElems);  // [2][kTile] lse·log2 e
  float* sD = sL + 2 * kTile;                                 // [2][kTile] Δ
  const int kb = blockIdx.x;  // low key blocks see the most queries: launched first
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, Tn = a.Tn, k0 = int64_t(kb) * kTile;
  const int nqt = static_cast<int>((Tn + kTile - 1) / kTile);
  const T *q = a.q.at(b, h), *g = a.dout.at(b, h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;

  auto load_rows = [&](int qt, int buf) {  // Q and dO tiles of query tile qt
    load_tile(sQ + buf * kTileElems, q, a.q.st, int64_t(qt) * kTile, Tn);
    load_tile(sG + buf * kTileElems, g, a.dout.st, int64_t(qt) * kTile, Tn);
  };
  // lse·log2 e (threads 0..63) or Δ (64..127) of query (qt·64 + thread % 64), 0 past the end
  auto row_stat = [&](int qt) {
    const int64_t t = int64_t(qt) * kTile + (threadIdx.x & (kTile - 1));
    if (t >= Tn) return 0.f;
    return threadIdx.x < kTile ? a.lse_in[bh * Tn + t] * kLog2e : a.delta[bh * Tn + t];
  };
  float* stat_dst = threadIdx.x < kTile ? sL : sD;  // + buf·64 + thread % 64
  load_tile(sK, a.k.at(b, h), a.k.st, k0, Tn);
  load_tile(sV, a.v.at(b, h), a.v.st, k0, Tn);
  load_rows(kb, 0);
  cp_async_commit();
  stat_dst[threadIdx.x & (kTile - 1)] = row_stat(kb);

  uint32_t kf[4][4], vf[4][4];
  float dk[8][4] = {}, dv[8][4] = {};
  const float sl2 = kScale * kLog2e;
  const int key_row = warp * 16 + gr;  // local key of accumulator rows r = 0 (and + 8)
  for (int qt = kb; qt < nqt; ++qt) {
    const int buf = (qt - kb) & 1;
    if (qt + 1 < nqt) load_rows(qt + 1, buf ^ 1);
    cp_async_commit();
    const float next_stat = qt + 1 < nqt ? row_stat(qt + 1) : 0.f;  // in flight during the products
    cp_async_wait<1>();
    __syncthreads();
    if (qt == kb) {
      load_a(kf, sK, warp * 16);
      load_a(vf, sV, warp * 16);
    }
    const int64_t r0 = int64_t(qt) * kTile;
    const T* tq_ = sQ + buf * kTileElems;
    const T* tg = sG + buf * kTileElems;
    const float* L = sL + buf * kTile;
    const float* Dl = sD + buf * kTile;
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<T>(s, kf, tq_);  // Sᵀ: rows keys, columns queries
    mma_abt<T>(dp, vf, tg);  // dPᵀ
    // masks only where they can bite: the diagonal tile (query < key) and the tile past T
    const bool diag = qt == kb, tail = r0 + kTile > Tn;
    const int valid = static_cast<int>(Tn - r0);  // queries of this tile below T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * tq + (e & 1);  // local query
        float p = exp2f(fmaf(s[j][e], sl2, -L[col]));
        if ((diag && col < key_row + 8 * (e >> 1)) || (tail && col >= valid)) p = 0.f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - Dl[col]);  // dSᵀ
      }
    uint32_t pf[4][4], dsf[4][4];
    to_a<T>(pf, s);
    to_a<T>(dsf, dp);
    mma_ab<T>(dv, pf, tg);
    mma_ab<T>(dk, dsf, tq_);
    stat_dst[(buf ^ 1) * kTile + (threadIdx.x & (kTile - 1))] = next_stat;  // read last iteration
    __syncthreads();
  }
  store_rows(a.dk.at(b, h), a.dk.st, k0 + warp * 16, Tn, dk, kScale);
  store_rows(a.dv.at(b, h), a.dv.st, k0 + warp * 16, Tn, dv, 1.f);
}

template <class Fn>
void visit_half(DType t, Fn&& fn) {
  if (t == DType::f16) return fn(half{});
  if (t == DType::bf16) return fn(bf16{});
  ST_THROW(DTypeError, "causal_attention: the flash kernels take f16/bf16, got " << dtype_name(t));
}

template <class T>
Args<T> make_args(int64_t H, int64_t Tn) {
  Args<T> a{};
  a.H = H;
  a.Tn = Tn;
  return a;
}

}  // namespace

// launchers

bool flash_attention_supported(DType dt, int64_t head_dim, int64_t BH, std::initializer_list<AttnOperand> ops) {
  if ((dt != DType::f16 && dt != DType::bf16) || head_dim != kD || BH > 65535) return false;
  for (const AttnOperand& o : ops)
    if (!st::cuda::aligned16(o.ptr) || o.sb % 8 || o.sh % 8 || o.st % 8) return false;
  return true;
}

void flash_attention_fwd(DType dt, int64_t B, int64_t H, int64_t Tn, AttnOperand q, AttnOperand k, AttnOperand v,
                         AttnOperand out, float* lse, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  const dim3 grid(static_cast<unsigned>((Tn + 64 * kFwdMT - 1) / (64 * kFwdMT)), static_cast<unsigned>(B * H));
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Tn);
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.out = typed<T>(out);
    a.lse = lse;
    flash_fwd_kernel<T, kFwdMT><<<grid, kThreads, 0, stream>>>(a);
    CHECK_LAUNCH();
  });
}

void flash_attention_bwd(DType dt, int64_t B, int64_t H, int64_t Tn, AttnOperand q, AttnOperand k, AttnOperand v,
                         AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq, AttnOperand dk,
                         AttnOperand dv, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  Tensor delta = Tensor::empty({B * H, Tn}, DType::f32, Device::cuda);  // (B·H, T)
  const unsigned tiles = static_cast<unsigned>((Tn + kTile - 1) / kTile), BH = static_cast<unsigned>(B * H);
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Tn);
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.o = typed<const T>(out);
    a.dout = typed<const T>(dout);
    a.dq = typed<T>(dq);
    a.dk = typed<T>(dk);
    a.dv = typed<T>(dv);
    a.lse_in = lse;
    a.delta = a.delta_out = delta.data<float>();
    flash_delta_kernel<T><<<dim3(static_cast<unsigned>((Tn + kDeltaRows - 1) / kDeltaRows), BH), 8 * kDeltaRows, 0, stream>>>(a);
    CHECK_LAUNCH();
    auto dkdv = flash_bwd_dkdv_kernel<T>;
    CHECK_CUDA(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDkdvSmem)));
    dkdv<<<dim3(tiles, BH), kThreads, kDkdvSmem, stream>>>(a);
    CHECK_LAUNCH();
    flash_bwd_dq_kernel<T><<<dim3(tiles, BH), kThreads, 0, stream>>>(a);
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
