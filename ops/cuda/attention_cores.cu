// CUDA-core causal attention on strided operands (see the header).
#include "ops/cuda/attention_cores.h"

#include <map>
#include <mutex>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.cuh"

namespace st::ops::cuda {
namespace {

constexpr int kR = 64;                // rows per block (query rows, or key rows for dK/dV)
constexpr int kQuad = 4;              // threads per row
constexpr int kThreads = kR * kQuad;  // 256
constexpr int kChunk = 16;            // keys per online-softmax update (forward)

// One staged tile: row j holds kQuad segments of G = MD / kQuad floats, each padded by one, so
// that the four lanes of a quad (reading segment g of the same row) hit four different banks.
template <int MD>
struct Tile {
  static constexpr int G = MD / kQuad, RS = kQuad * (G + 1);  // per-lane width, row stride
  __device__ static int at(int j, int d) { return j * RS + (d / G) * (G + 1) + d % G; }
};

__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

// element (b, h, t, d) of a strided operand
template <class T>
__device__ inline const T* row_of(const AttnOperand& a, int64_t b, int64_t h, int64_t t) {
  return static_cast<const T*>(a.ptr) + b * a.sb + h * a.sh + t * a.st;
}
template <class T>
__device__ inline T* row_of_mut(const AttnOperand& a, int64_t b, int64_t h, int64_t t) {
  return static_cast<T*>(a.ptr) + b * a.sb + h * a.sh + t * a.st;
}

// element d of row t of head h of x, rotated (position rope.offset + t) when Rope
template <class T, bool Rope>
__device__ inline float element(const AttnOperand& x, int64_t b, int64_t h, int64_t t, int d, int D,
                                const AttnRope& rope) {
  const T* row = row_of<T>(x, b, h, t);
  if constexpr (Rope)
    return rope_element<T>(row, d, D, rope.offset + t, rope);
  else
    return to_float(row[d]);
}

// rows r0 … r0 + kR − 1 of one or two operands → tiles (zeros past Tn and past D); X's rows
// rotated when Rope (q or k), Y's never (v, dO). X and Y may have different heads (hx, hy).
template <class T, int MD, bool Rope>
__device__ void stage(float* X, float* Y, const AttnOperand& x, const AttnOperand& y, int64_t b, int64_t hx,
                      int64_t hy, int64_t r0, int64_t Tn, int D, const AttnRope& rope) {
  for (int i = threadIdx.x; i < kR * MD; i += kThreads) {
    const int j = i / MD, d = i % MD;
    const bool in = r0 + j < Tn && d < D;
    X[Tile<MD>::at(j, d)] = in ? element<T, Rope>(x, b, hx, r0 + j, d, D, rope) : 0.f;
    if (Y) Y[Tile<MD>::at(j, d)] = in ? to_float(row_of<T>(y, b, hy, r0 + j)[d]) : 0.f;
  }
}

// this thread's segment of row t of x (zeros past Tn and D), rotated when Rope, times s
template <class T, int MD, bool Rope>
__device__ void load_segment(float (&r)[MD / kQuad], const AttnOperand& x, int64_t b, int64_t h, int64_t t,
                             int64_t Tn, int D, int g, float s, const AttnRope& rope) {
  constexpr int G = MD / kQuad;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int d = g * G + i;
    r[i] = (t < Tn && d < D) ? element<T, Rope>(x, b, h, t, d, D, rope) * s : 0.f;
  }
}

// The block's rows of a gradient with respect to roped rows (this thread: row jr of the block, at
// position rope.offset + t, segment g), turned back (Rᵀ) through a shared tile: a row's partner
// columns d ± D/2 sit in other lanes. Every thread of the block calls it (it syncs); `scratch` holds
// a kR-row tile and is free on entry.
template <class T, int MD>
__device__ void rope_back_segment(float (&r)[MD / kQuad], float* scratch, int jr, int g, int64_t t, int64_t Tn, int D,
                                  const AttnRope& rope) {
  constexpr int G = MD / kQuad;
  const int half_dim = D / 2;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < G; ++i) scratch[Tile<MD>::at(jr, g * G + i)] = r[i];
  __syncthreads();
  if (t >= Tn) return;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int d = g * G + i;
    if (d >= D) continue;
    const int f = d < half_dim ? d : d - half_dim;
    float lo = scratch[Tile<MD>::at(jr, f)], hi = scratch[Tile<MD>::at(jr, f + half_dim)], c, s;
    rope_cs<T>(rope, rope.offset + t, f, half_dim, c, s);
    rope_unrotate(lo, hi, c, s);
    r[i] = d < half_dim ? lo : hi;
  }
}

template <class T, int MD>
__device__ void store_segment(const float (&r)[MD / kQuad], const AttnOperand& x, int64_t b, int64_t h, int64_t t,
                              int64_t Tn, int D, int g, float s) {
  constexpr int G = MD / kQuad;
  if (t >= Tn) return;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int d = g * G + i;
    if (d < D) row_of_mut<T>(x, b, h, t)[d] = from_float<T>(r[i] * s);
  }
}

// grid (⌈T / kR⌉, B·H); one quad per query row t of head h, against key/value head h / rep
template <class T, int MD, bool Rope>
__global__ void __launch_bounds__(kThreads) core_fwd_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                            AttnOperand o, float* lse, int64_t H, int64_t rep,
                                                            int64_t Tn, int D, float scale, AttnRope rope) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Ks = smem;
  float* Vs = Ks + kR * Tile<MD>::RS;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, hk = h / rep;
  const int g = threadIdx.x % kQuad;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kR), t = t0 + threadIdx.x / kQuad;
  float qr[G], acc[G];
  load_segment<T, MD, Rope>(qr, q, b, h, t, Tn, D, g, scale, rope);
#pragma unroll
  for (int i = 0; i < G; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t kend = min(Tn, t0 + kR);  // keys the block's last row sees
  for (int64_t s0 = 0; s0 < kend; s0 += kR) {
    __syncthreads();
    stage<T, MD, Rope>(Ks, Vs, k, v, b, hk, hk, s0, Tn, D, rope);
    __syncthreads();
    for (int c = 0; c < kR; c += kChunk) {
      float sc[kChunk];
      float cmax = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        const int j = c + jj;
        float part = 0.f;
#pragma unroll
        for (int i = 0; i < G; ++i) part += qr[i] * Ks[Tile<MD>::at(j, g * G + i)];
        const float sv = quad_sum(part);
        sc[jj] = (s0 + j <= t && s0 + j < Tn) ? sv : -INFINITY;  // causal: keys s ≤ t
        cmax = fmaxf(cmax, sc[jj]);
      }
      const float mn = fmaxf(m, cmax);
      if (mn == -INFINITY) continue;  // nothing seen yet for this row (no shuffles below)
      const float corr = expf(m - mn);  // m = −∞: 0
      l *= corr;
#pragma unroll
      for (int i = 0; i < G; ++i) acc[i] *= corr;
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        const float p = expf(sc[jj] - mn);  // masked: exp(−∞) = 0
        l += p;
#pragma unroll
        for (int i = 0; i < G; ++i) acc[i] += p * Vs[Tile<MD>::at(c + jj, g * G + i)];
      }
      m = mn;
    }
  }
  if (t < Tn) {
    store_segment<T, MD>(acc, o, b, h, t, Tn, D, g, 1.f / l);
    if (g == 0) lse[bh * Tn + t] = m + logf(l);
  }
}

// Δ (B·H, T) = Σ_d dO·O; one warp per row
template <class T>
__global__ void core_delta_kernel(AttnOperand dout, AttnOperand out, float* delta, int64_t H, int64_t Tn, int D,
                                  int64_t rows) {
  const int64_t r = blockIdx.x * 8LL + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t bh = r / Tn, t = r % Tn, b = bh / H, h = bh % H;
  const T* go = row_of<T>(dout, b, h, t);
  const T* oo = row_of<T>(out, b, h, t);
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += to_float(go[d]) * to_float(oo[d]);
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// grid (⌈T / kR⌉, B·Hkv); one quad per key row s of key/value head hk; the query heads of its
// group in order, each over its query tiles t ≥ s
template <class T, int MD, bool Rope>
__global__ void __launch_bounds__(kThreads) core_dkdv_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                             AttnOperand dout, const float* lse, const float* delta,
                                                             AttnOperand dk, AttnOperand dv, int64_t H, int64_t rep,
                                                             int64_t Tn, int D, float scale, AttnRope rope) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Qs = smem;
  float* Gs = Qs + kR * Tile<MD>::RS;
  float* Ls = Gs + kR * Tile<MD>::RS;
  float* Ds = Ls + kR;
  const int64_t Hkv = H / rep, bkv = blockIdx.y, b = bkv / Hkv, hk = bkv % Hkv;
  const int g = threadIdx.x % kQuad;
  const int64_t s0 = blockIdx.x * static_cast<int64_t>(kR), s = s0 + threadIdx.x / kQuad;
  float kr[G], vr[G], dkr[G], dvr[G];
  load_segment<T, MD, Rope>(kr, k, b, hk, s, Tn, D, g, 1.f, rope);
  load_segment<T, MD, false>(vr, v, b, hk, s, Tn, D, g, 1.f, rope);
#pragma unroll
  for (int i = 0; i < G; ++i) dkr[i] = dvr[i] = 0.f;
  for (int64_t h = hk * rep; h < (hk + 1) * rep; ++h)  // the group's query heads, in order
    for (int64_t q0 = s0; q0 < Tn; q0 += kR) {
    const int64_t bh = b * H + h;
    __syncthreads();
    stage<T, MD, Rope>(Qs, Gs, q, dout, b, h, h, q0, Tn, D, rope);
    for (int i = threadIdx.x; i < kR; i += kThreads) {
      Ls[i] = q0 + i < Tn ? lse[bh * Tn + q0 + i] : 0.f;
      Ds[i] = q0 + i < Tn ? delta[bh * Tn + q0 + i] : 0.f;
    }
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kR; ++j) {
      float pq = 0.f, pg = 0.f;
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int a = Tile<MD>::at(j, g * G + i);
        pq += kr[i] * Qs[a];
        pg += vr[i] * Gs[a];
      }
      const float qk = quad_sum(pq), dp = quad_sum(pg);
      const int64_t t = q0 + j;
      const float p = (t >= s && t < Tn && s < Tn) ? expf(qk * scale - Ls[j]) : 0.f;
      const float ds = p * (dp - Ds[j]);
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int a = Tile<MD>::at(j, g * G + i);
        dvr[i] += p * Gs[a];
        dkr[i] += ds * Qs[a];
      }
    }
  }
  if constexpr (Rope) rope_back_segment<T, MD>(dkr, Qs, threadIdx.x / kQuad, g, s, Tn, D, rope);  // dK = Rᵀ·dK'
  store_segment<T, MD>(dkr, dk, b, hk, s, Tn, D, g, scale);
  store_segment<T, MD>(dvr, dv, b, hk, s, Tn, D, g, 1.f);
}

// grid (⌈T / kR⌉, B·H); one quad per query row t of head h; the key tiles s ≤ t of head h / rep
template <class T, int MD, bool Rope>
__global__ void __launch_bounds__(kThreads) core_dq_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                           AttnOperand dout, const float* lse, const float* delta,
                                                           AttnOperand dq, int64_t H, int64_t rep, int64_t Tn, int D,
                                                           float scale, AttnRope rope) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Ks = smem;
  float* Vs = Ks + kR * Tile<MD>::RS;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, hk = h / rep;
  const int g = threadIdx.x % kQuad;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kR), t = t0 + threadIdx.x / kQuad;
  float qr[G], gr[G], dqr[G];
  load_segment<T, MD, Rope>(qr, q, b, h, t, Tn, D, g, 1.f, rope);
  load_segment<T, MD, false>(gr, dout, b, h, t, Tn, D, g, 1.f, rope);
#pragma unroll
  for (int i = 0; i < G; ++i) dqr[i] = 0.f;
  const float L = t < Tn ? lse[bh * Tn + t] : 0.f, Dt = t < Tn ? delta[bh * Tn + t] : 0.f;
  const int64_t kend = min(Tn, t0 + kR);
  for (int64_t s0 = 0; s0 < kend; s0 += kR) {
    __syncthreads();
    stage<T, MD, Rope>(Ks, Vs, k, v, b, hk, hk, s0, Tn, D, rope);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kR; ++j) {
      float pq = 0.f, pg = 0.f;
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int a = Tile<MD>::at(j, g * G + i);
        pq += qr[i] * Ks[a];
        pg += gr[i] * Vs[a];
      }
      const float qk = quad_sum(pq), dp = quad_sum(pg);
      const int64_t s = s0 + j;
      const float p = (s <= t && t < Tn) ? expf(qk * scale - L) : 0.f;
      const float ds = p * (dp - Dt);
#pragma unroll
      for (int i = 0; i < G; ++i) dqr[i] += ds * Ks[Tile<MD>::at(j, g * G + i)];
    }
  }
  if constexpr (Rope) rope_back_segment<T, MD>(dqr, Ks, threadIdx.x / kQuad, g, t, Tn, D, rope);  // dQ = Rᵀ·dQ'
  store_segment<T, MD>(dqr, dq, b, h, t, Tn, D, g, scale);
}

// MD ∈ {32, 64, 128} ≥ D
template <class Fn>
void visit_width(int D, Fn&& fn) {
  if (D <= 32) return fn(std::integral_constant<int, 32>{});
  if (D <= 64) return fn(std::integral_constant<int, 64>{});
  if (D <= kCoreMaxHeadDim) return fn(std::integral_constant<int, 128>{});
  ST_THROW(ShapeError, "causal_attention: the CUDA-core kernels take head dims up to " << kCoreMaxHeadDim << ", got "
                                                                                        << D);
}

// dynamic shared memory above 48 KiB needs the kernel's opt-in, asked once per kernel (at the
// first call: never inside a CUDA graph capture, whose warm-up step runs first). Keyed by the
// kernel's address: the instantiations of one template share a function type, so a static per
// type would let the second one launch without its opt-in ("invalid argument", seen on the H200
// at 94a899e for D = 128 in f16 after f32).
template <class K>
void allow_smem(K kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<const void*, size_t> allowed;
  if (bytes <= 48 * 1024) return;
  std::lock_guard<std::mutex> lock(mu);
  size_t& a = allowed[reinterpret_cast<const void*>(kernel)];
  if (bytes <= a) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  a = bytes;
}

template <int MD>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kR) * Tile<MD>::RS * sizeof(float);
}

void check_grid(int64_t B, int64_t H) {
  ST_CHECK(B * H <= 65535, ShapeError, "causal_attention: the CUDA-core kernels take B·H ≤ 65535, got " << B * H);
}

}  // namespace

// kernel<…, Rope>: the instantiation with rope only when the call has one
template <class Fn>
void with_rope(const AttnRope& rope, Fn&& fn) {
  if (rope.on())
    fn(std::true_type{});
  else
    fn(std::false_type{});
}

void core_attention_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int D, const AttnOperand& q,
                        const AttnOperand& k, const AttnOperand& v, const AttnOperand& out, float* lse,
                        const AttnRope& rope, cudaStream_t stream) {
  if (B * H == 0 || T == 0) return;
  check_grid(B, H);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const dim3 grid(static_cast<unsigned>((T + kR - 1) / kR), static_cast<unsigned>(B * H));
  visit_float_dtype(dt, "causal_attention", [&](auto tag) {
    using T_ = decltype(tag);
    visit_width(D, [&](auto md) {
      constexpr int MD = decltype(md)::value;
      with_rope(rope, [&](auto r) {
        const size_t smem = 2 * tile_bytes<MD>();
        auto kernel = core_fwd_kernel<T_, MD, decltype(r)::value>;
        allow_smem(kernel, smem);
        kernel<<<grid, kThreads, smem, stream>>>(q, k, v, out, lse, H, H / Hkv, T, D, scale, rope);
        CHECK_LAUNCH();
      });
    });
  });
}

void core_attention_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int D, const AttnOperand& q,
                        const AttnOperand& k, const AttnOperand& v, const AttnOperand& out, const AttnOperand& dout,
                        const float* lse, const AttnOperand& dq, const AttnOperand& dk, const AttnOperand& dv,
                        const AttnRope& rope, cudaStream_t stream) {
  if (B * H == 0 || T == 0) return;
  check_grid(B, H);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const int64_t rows = B * H * T;
  Tensor delta = Tensor::empty({rows}, DType::f32, Device::cuda);  // (B·H, T)
  const dim3 grid(static_cast<unsigned>((T + kR - 1) / kR), static_cast<unsigned>(B * H));
  const dim3 grid_kv(static_cast<unsigned>((T + kR - 1) / kR), static_cast<unsigned>(B * Hkv));
  visit_float_dtype(dt, "causal_attention", [&](auto tag) {
    using T_ = decltype(tag);
    core_delta_kernel<T_><<<grid_for(rows, 8, INT32_MAX), 256, 0, stream>>>(dout, out, delta.data<float>(), H, T, D,
                                                                            rows);
    CHECK_LAUNCH();
    visit_width(D, [&](auto md) {
      constexpr int MD = decltype(md)::value;
      with_rope(rope, [&](auto r) {
        constexpr bool kRope = decltype(r)::value;
        const size_t smem_kv = 2 * tile_bytes<MD>() + 2 * kR * sizeof(float), smem_q = 2 * tile_bytes<MD>();
        auto kv = core_dkdv_kernel<T_, MD, kRope>;
        allow_smem(kv, smem_kv);
        kv<<<grid_kv, kThreads, smem_kv, stream>>>(q, k, v, dout, lse, delta.data<float>(), dk, dv, H, H / Hkv, T, D,
                                                   scale, rope);
        CHECK_LAUNCH();
        auto kq = core_dq_kernel<T_, MD, kRope>;
        allow_smem(kq, smem_q);
        kq<<<grid, kThreads, smem_q, stream>>>(q, k, v, dout, lse, delta.data<float>(), dq, H, H / Hkv, T, D, scale,
                                               rope);
        CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace st::ops::cuda
