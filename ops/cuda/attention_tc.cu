// Tensor-core flash attention (causal) for f16/bf16, head dim 64, through WMMA 16×16×16 tiles
// with f32 accumulation. Blocks of 4 warps own 64 rows (16 per warp); tiles of 64 keys/queries
// stream through shared memory (rows padded to 72 halves / 68 floats against bank conflicts).
//   fwd:   S = Q·Kᵀ per warp → online softmax on the warp's rows in shared memory (running max m,
//          sum l in registers, P rounded to the input dtype as in FlashAttention) → O += P·V with
//          O kept in shared f32 so it can be rescaled; lse = m + log l. Never writes T×T.
//   dq:    per query block over key tiles s ≤ t: S, dP = dO·Vᵀ, dS = P ∘ (dP − Δ), dQ += dS·K
//          (dQ stays in WMMA accumulators).
//   dkdv:  per key block over query tiles t ≥ s: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q.
// Each output element is written once (=), no atomics: deterministic.
#include <mma.h>

#include "ops/cuda/attention_tc.h"
#include "ops/cuda/common.cuh"

namespace st::ops::cuda {
namespace {

using namespace nvcuda;
constexpr int kD = 64, kTile = 64, kLdh = 72, kLdf = 68, kThreads = 128;
constexpr int kHalfTile = kTile * kLdh;   // elements of one 16-bit tile
constexpr int kFloatTile = kTile * kLdf;  // elements of one f32 tile

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// kernels (device helpers first)

// 64 rows × 64 of global (row stride kD) → shared (row stride kLdh); rows ≥ valid are zeros.
template <class T>
__device__ inline void load_tile(T* dst, const T* src, int64_t valid) {
  for (int i = threadIdx.x; i < kTile * kD / 8; i += kThreads) {
    const int r = i / (kD / 8), c = (i % (kD / 8)) * 8;
    int4 v = make_int4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const int4*>(src + static_cast<int64_t>(r) * kD + c);
    *reinterpret_cast<int4*>(dst + r * kLdh + c) = v;
  }
}

// dst (16 × 64 f32, ld kLdf) = A_rows (16 × 64, row-major) · B where B(k, n) = Bsrc[n][k]
// (Bsrc row-major 64 × 64: the product with its transpose).
template <class T>
__device__ inline void mma_abt(float* dst, const T* a, const T* b) {
  for (int n = 0; n < 4; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    for (int k = 0; k < 4; ++k) {
      FragA<T> fa;
      FragBCol<T> fb;
      wmma::load_matrix_sync(fa, a + 16 * k, kLdh);
      wmma::load_matrix_sync(fb, b + 16 * n * kLdh + 16 * k, kLdh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(dst + 16 * n, acc, kLdf, wmma::mem_row_major);
  }
}

// acc[n] += A_rows (16 × 64, row-major) · B (64 × 64, row-major), four 16-column accumulators
template <class T>
__device__ inline void mma_ab_acc(FragC* acc, const T* a, const T* b) {
  for (int k = 0; k < 4; ++k) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + 16 * k, kLdh);
    for (int n = 0; n < 4; ++n) {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, b + 16 * k * kLdh + 16 * n, kLdh);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// q, k, v, out (BH, T, 64); lse (BH, T)
template <class T>
__global__ void __launch_bounds__(kThreads) attention_fwd_tc_kernel(const T* q, const T* k, const T* v, T* out,
                                                                    float* lse, int64_t Tn, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* Ks = Qs + kHalfTile;
  T* Vs = Ks + kHalfTile;
  T* Ps = Vs + kHalfTile;
  float* Ss = reinterpret_cast<float*>(Ps + kHalfTile);
  float* Os = Ss + kFloatTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bh = blockIdx.y, base = bh * Tn * kD;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTile;  // longest rows first
  load_tile(Qs, q + base + q0 * kD, Tn - q0);
  const int r = 16 * warp + (lane >> 1), c0 = (lane & 1) * 32;  // this lane's row and half row
  const int64_t t = q0 + r;
  for (int c = 0; c < 32; ++c) Os[r * kLdf + c0 + c] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int64_t s0 = 0; s0 <= q0; s0 += kTile) {
    __syncthreads();
    load_tile(Ks, k + base + s0 * kD, Tn - s0);
    load_tile(Vs, v + base + s0 * kD, Tn - s0);
    __syncthreads();
    mma_abt(Ss + 16 * warp * kLdf, Qs + 16 * warp * kLdh, Ks);
    __syncwarp();
    float* srow = Ss + r * kLdf + c0;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int64_t s = s0 + c0 + c;
      const float x = (s <= t && s < Tn) ? srow[c] * scale : -INFINITY;
      srow[c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float mn = fmaxf(m, mx);
    float sum = 0.f;
    T* prow = Ps + r * kLdh + c0;
    for (int c = 0; c < 32; ++c) {
      const float p = srow[c] == -INFINITY ? 0.f : __expf(srow[c] - mn);
      prow[c] = from_float<T>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float corr = m == -INFINITY ? 0.f : __expf(m - mn);
    l = l * corr + sum;
    m = mn;
    float* orow = Os + r * kLdf + c0;
    for (int c = 0; c < 32; ++c) orow[c] *= corr;
    __syncwarp();
    FragC acc[4];
    for (int n = 0; n < 4; ++n) wmma::load_matrix_sync(acc[n], Os + 16 * warp * kLdf + 16 * n, kLdf, wmma::mem_row_major);
    mma_ab_acc(acc, Ps + 16 * warp * kLdh, Vs);
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(Os + 16 * warp * kLdf + 16 * n, acc[n], kLdf, wmma::mem_row_major);
    __syncwarp();
  }
  if (t < Tn) {
    const float inv = 1.f / l;
    T* orow_g = out + base + t * kD + c0;
    for (int c = 0; c < 32; ++c) orow_g[c] = from_float<T>(Os[r * kLdf + c0 + c] * inv);
    if ((lane & 1) == 0) lse[bh * Tn + t] = m + logf(l);
  }
}

// dq (BH, T, 64) over key tiles s ≤ t
template <class T>
__global__ void __launch_bounds__(kThreads) attention_bwd_dq_tc_kernel(const T* q, const T* k, const T* v,
                                                                       const T* dout, const float* lse,
                                                                       const float* delta, T* dq, int64_t Tn,
                                                                       float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* dOs = Qs + kHalfTile;
  T* Ks = dOs + kHalfTile;
  T* Vs = Ks + kHalfTile;
  T* Ps = Vs + kHalfTile;  // dS
  float* Ss = reinterpret_cast<float*>(Ps + kHalfTile);
  float* DPs = Ss + kFloatTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bh = blockIdx.y, base = bh * Tn * kD;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTile;  // longest rows first
  load_tile(Qs, q + base + q0 * kD, Tn - q0);
  load_tile(dOs, dout + base + q0 * kD, Tn - q0);
  const int r = 16 * warp + (lane >> 1), c0 = (lane & 1) * 32;
  const int64_t t = q0 + r;
  const float L = t < Tn ? lse[bh * Tn + t] : 0.f, Dt = t < Tn ? delta[bh * Tn + t] : 0.f;
  FragC acc[4];
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(acc[n], 0.f);
  for (int64_t s0 = 0; s0 <= q0; s0 += kTile) {
    __syncthreads();
    load_tile(Ks, k + base + s0 * kD, Tn - s0);
    load_tile(Vs, v + base + s0 * kD, Tn - s0);
    __syncthreads();
    mma_abt(Ss + 16 * warp * kLdf, Qs + 16 * warp * kLdh, Ks);
    mma_abt(DPs + 16 * warp * kLdf, dOs + 16 * warp * kLdh, Vs);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int64_t s = s0 + c0 + c;
      float ds = 0.f;
      if (s <= t && s < Tn && t < Tn) {
        const float p = __expf(Ss[r * kLdf + c0 + c] * scale - L);
        ds = p * (DPs[r * kLdf + c0 + c] - Dt);
      }
      Ps[r * kLdh + c0 + c] = from_float<T>(ds);
    }
    __syncwarp();
    mma_ab_acc(acc, Ps + 16 * warp * kLdh, Ks);
  }
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(Ss + 16 * warp * kLdf + 16 * n, acc[n], kLdf, wmma::mem_row_major);
  __syncwarp();
  if (t < Tn)
    for (int c = 0; c < 32; ++c) dq[base + t * kD + c0 + c] = from_float<T>(Ss[r * kLdf + c0 + c] * scale);
}

// dk, dv (BH, T, 64) over query tiles t ≥ s
template <class T>
__global__ void __launch_bounds__(kThreads) attention_bwd_dkdv_tc_kernel(const T* q, const T* k, const T* v,
                                                                         const T* dout, const float* lse,
                                                                         const float* delta, T* dk, T* dv, int64_t Tn,
                                                                         float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* Ks = reinterpret_cast<T*>(smem_raw);
  T* Vs = Ks + kHalfTile;
  T* Qs = Vs + kHalfTile;
  T* dOs = Qs + kHalfTile;
  T* Ps = dOs + kHalfTile;   // Pᵀ
  T* DSs = Ps + kHalfTile;   // dSᵀ
  float* Ss = reinterpret_cast<float*>(DSs + kHalfTile);
  float* DPs = Ss + kFloatTile;
  float* Ls = DPs + kFloatTile;
  float* Dl = Ls + kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bh = blockIdx.y, base = bh * Tn * kD;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile(Ks, k + base + s0 * kD, Tn - s0);
  load_tile(Vs, v + base + s0 * kD, Tn - s0);
  const int r = 16 * warp + (lane >> 1), c0 = (lane & 1) * 32;  // r: key row in the tile
  const int64_t s = s0 + r;
  FragC dka[4], dva[4];
  for (int n = 0; n < 4; ++n) {
    wmma::fill_fragment(dka[n], 0.f);
    wmma::fill_fragment(dva[n], 0.f);
  }
  for (int64_t q0 = s0; q0 < Tn; q0 += kTile) {
    __syncthreads();
    load_tile(Qs, q + base + q0 * kD, Tn - q0);
    load_tile(dOs, dout + base + q0 * kD, Tn - q0);
    if (threadIdx.x < kTile) {
      const int64_t tq = q0 + threadIdx.x;
      Ls[threadIdx.x] = tq < Tn ? lse[bh * Tn + tq] : 0.f;
      Dl[threadIdx.x] = tq < Tn ? delta[bh * Tn + tq] : 0.f;
    }
    __syncthreads();
    mma_abt(Ss + 16 * warp * kLdf, Ks + 16 * warp * kLdh, Qs);
    mma_abt(DPs + 16 * warp * kLdf, Vs + 16 * warp * kLdh, dOs);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int64_t tq = q0 + c0 + c;
      float p = 0.f, ds = 0.f;
      if (s <= tq && tq < Tn && s < Tn) {
        p = __expf(Ss[r * kLdf + c0 + c] * scale - Ls[c0 + c]);
        ds = p * (DPs[r * kLdf + c0 + c] - Dl[c0 + c]);
      }
      Ps[r * kLdh + c0 + c] = from_float<T>(p);
      DSs[r * kLdh + c0 + c] = from_float<T>(ds);
    }
    __syncwarp();
    mma_ab_acc(dva, Ps + 16 * warp * kLdh, dOs);
    mma_ab_acc(dka, DSs + 16 * warp * kLdh, Qs);
  }
  for (int n = 0; n < 4; ++n) {
    wmma::store_matrix_sync(Ss + 16 * warp * kLdf + 16 * n, dka[n], kLdf, wmma::mem_row_major);
    wmma::store_matrix_sync(DPs + 16 * warp * kLdf + 16 * n, dva[n], kLdf, wmma::mem_row_major);
  }
  __syncwarp();
  if (s < Tn)
    for (int c = 0; c < 32; ++c) {
      dk[base + s * kD + c0 + c] = from_float<T>(Ss[r * kLdf + c0 + c] * scale);
      dv[base + s * kD + c0 + c] = from_float<T>(DPs[r * kLdf + c0 + c]);
    }
}

template <class K>
void launch(K kernel, dim3 grid, size_t smem, cudaStream_t stream, auto... args) {
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  CHECK_LAUNCH();
}

template <class Fn>
void visit_half(DType t, Fn&& fn) {
  if (t == DType::f16) return fn(half{});
  if (t == DType::bf16) return fn(bf16{});
  ST_THROW(DTypeError, "causal_attention: the tensor-core kernel takes f16/bf16, got " << dtype_name(t));
}

}  // namespace

// launchers

bool attention_tc_supported(const Tensor& q) {
  return (q.dtype() == DType::f16 || q.dtype() == DType::bf16) && q.size(-1) == kD;
}

void attention_fwd_tc(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                      cudaStream_t stream) {
  const int64_t BH = q.numel() / (q.size(-2) * kD), Tn = q.size(-2);
  const dim3 grid(static_cast<unsigned>((Tn + kTile - 1) / kTile), static_cast<unsigned>(BH));
  const size_t smem = 4 * kHalfTile * 2 + 2 * kFloatTile * 4;
  const float scale = 0.125f;  // 1/√64
  visit_half(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch(attention_fwd_tc_kernel<T>, grid, smem, stream, static_cast<const T*>(q.data_ptr()),
           static_cast<const T*>(k.data_ptr()), static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()),
           lse.data<float>(), Tn, scale);
  });
}

void attention_bwd_tc(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, const Tensor& delta,
                      const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, cudaStream_t stream) {
  const int64_t BH = q.numel() / (q.size(-2) * kD), Tn = q.size(-2);
  const dim3 grid(static_cast<unsigned>((Tn + kTile - 1) / kTile), static_cast<unsigned>(BH));
  const float scale = 0.125f;
  visit_half(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(q.data_ptr());
    const T* pk = static_cast<const T*>(k.data_ptr());
    const T* pv = static_cast<const T*>(v.data_ptr());
    const T* pg = static_cast<const T*>(dout.data_ptr());
    launch(attention_bwd_dkdv_tc_kernel<T>, grid, 6 * kHalfTile * 2 + 2 * kFloatTile * 4 + 2 * kTile * 4, stream, pq,
           pk, pv, pg, lse.data<float>(), delta.data<float>(), static_cast<T*>(dk.data_ptr()),
           static_cast<T*>(dv.data_ptr()), Tn, scale);
    launch(attention_bwd_dq_tc_kernel<T>, grid, 5 * kHalfTile * 2 + 2 * kFloatTile * 4, stream, pq, pk, pv, pg,
           lse.data<float>(), delta.data<float>(), static_cast<T*>(dq.data_ptr()), Tn, scale);
  });
}

}  // namespace st::ops::cuda
