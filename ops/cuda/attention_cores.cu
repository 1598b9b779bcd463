// CUDA-core causal attention on strided operands (see the header).
#include "ops/cuda/attention_cores.h"

#include <map>
#include <mutex>

#include "ops/cuda/common.cuh"

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

// rows r0 … r0 + kR − 1 of one or two operands → tiles (zeros past Tn and past D)
template <class T, int MD>
__device__ void stage(float* X, float* Y, const AttnOperand& x, const AttnOperand& y, int64_t b, int64_t h,
                      int64_t r0, int64_t Tn, int D) {
  for (int i = threadIdx.x; i < kR * MD; i += kThreads) {
    const int j = i / MD, d = i % MD;
    const bool in = r0 + j < Tn && d < D;
    X[Tile<MD>::at(j, d)] = in ? to_float(row_of<T>(x, b, h, r0 + j)[d]) : 0.f;
    if (Y) Y[Tile<MD>::at(j, d)] = in ? to_float(row_of<T>(y, b, h, r0 + j)[d]) : 0.f;
  }
}

// this thread's segment of row t of x (zeros past Tn and D), times s
template <class T, int MD>
__device__ void load_segment(float (&r)[MD / kQuad], const AttnOperand& x, int64_t b, int64_t h, int64_t t,
                             int64_t Tn, int D, int g, float s) {
  constexpr int G = MD / kQuad;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int d = g * G + i;
    r[i] = (t < Tn && d < D) ? to_float(row_of<T>(x, b, h, t)[d]) * s : 0.f;
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

// grid (⌈T / kR⌉, B·H); one quad per query row t
template <class T, int MD>
__global__ void __launch_bounds__(kThreads) core_fwd_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                            AttnOperand o, float* lse, int64_t H, int64_t Tn, int D,
                                                            float scale) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Ks = smem;
  float* Vs = Ks + kR * Tile<MD>::RS;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  const int g = threadIdx.x % kQuad;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kR), t = t0 + threadIdx.x / kQuad;
  float qr[G], acc[G];
  load_segment<T, MD>(qr, q, b, h, t, Tn, D, g, scale);
#pragma unroll
  for (int i = 0; i < G; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t kend = min(Tn, t0 + kR);  // keys the block's last row sees
  for (int64_t s0 = 0; s0 < kend; s0 += kR) {
    __syncthreads();
    stage<T, MD>(Ks, Vs, k, v, b, h, s0, Tn, D);
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

// grid (⌈T / kR⌉, B·H); one quad per key row s; the query tiles t ≥ s
template <class T, int MD>
__global__ void __launch_bounds__(kThreads) core_dkdv_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                             AttnOperand dout, const float* lse, const float* delta,
                                                             AttnOperand dk, AttnOperand dv, int64_t H, int64_t Tn,
                                                             int D, float scale) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Qs = smem;
  float* Gs = Qs + kR * Tile<MD>::RS;
  float* Ls = Gs + kR * Tile<MD>::RS;
  float* Ds = Ls + kR;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  const int g = threadIdx.x % kQuad;
  const int64_t s0 = blockIdx.x * static_cast<int64_t>(kR), s = s0 + threadIdx.x / kQuad;
  float kr[G], vr[G], dkr[G], dvr[G];
  load_segment<T, MD>(kr, k, b, h, s, Tn, D, g, 1.f);
  load_segment<T, MD>(vr, v, b, h, s, Tn, D, g, 1.f);
#pragma unroll
  for (int i = 0; i < G; ++i) dkr[i] = dvr[i] = 0.f;
  for (int64_t q0 = s0; q0 < Tn; q0 += kR) {
    __syncthreads();
    stage<T, MD>(Qs, Gs, q, dout, b, h, q0, Tn, D);
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
  store_segment<T, MD>(dkr, dk, b, h, s, Tn, D, g, scale);
  store_segment<T, MD>(dvr, dv, b, h, s, Tn, D, g, 1.f);
}

// grid (⌈T / kR⌉, B·H); one quad per query row t; the key tiles s ≤ t
template <class T, int MD>
__global__ void __launch_bounds__(kThreads) core_dq_kernel(AttnOperand q, AttnOperand k, AttnOperand v,
                                                           AttnOperand dout, const float* lse, const float* delta,
                                                           AttnOperand dq, int64_t H, int64_t Tn, int D, float scale) {
  extern __shared__ float smem[];
  constexpr int G = MD / kQuad;
  float* Ks = smem;
  float* Vs = Ks + kR * Tile<MD>::RS;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  const int g = threadIdx.x % kQuad;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kR), t = t0 + threadIdx.x / kQuad;
  float qr[G], gr[G], dqr[G];
  load_segment<T, MD>(qr, q, b, h, t, Tn, D, g, 1.f);
  load_segment<T, MD>(gr, dout, b, h, t, Tn, D, g, 1.f);
#pragma unroll
  for (int i = 0; i < G; ++i) dqr[i] = 0.f;
  const float L = t < Tn ? lse[bh * Tn + t] : 0.f, Dt = t < Tn ? delta[bh * Tn + t] : 0.f;
  const int64_t kend = min(Tn, t0 + kR);
  for (int64_t s0 = 0; s0 < kend; s0 += kR) {
    __syncthreads();
    stage<T, MD>(Ks, Vs, k, v, b, h, s0, Tn, D);
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

void core_attention_fwd(DType dt, int64_t B, int64_t H, int64_t T, int D, const AttnOperand& q, const AttnOperand& k,
                        const AttnOperand& v, const AttnOperand& out, float* lse, cudaStream_t stream) {
  if (B * H == 0 || T == 0) return;
  check_grid(B, H);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const dim3 grid(static_cast<unsigned>((T + kR - 1) / kR), static_cast<unsigned>(B * H));
  visit_float_dtype(dt, "causal_attention", [&](auto tag) {
    using T_ = decltype(tag);
    visit_width(D, [&](auto md) {
      constexpr int MD = decltype(md)::value;
      const size_t smem = 2 * tile_bytes<MD>();
      auto kernel = core_fwd_kernel<T_, MD>;
      allow_smem(kernel, smem);
      kernel<<<grid, kThreads, smem, stream>>>(q, k, v, out, lse, H, T, D, scale);
      CHECK_LAUNCH();
    });
  });
}

void core_attention_bwd(DType dt, int64_t B, int64_t H, int64_t T, int D, const AttnOperand& q, const AttnOperand& k,
                        const AttnOperand& v, const AttnOperand& out, const AttnOperand& dout, const float* lse,
                        const AttnOperand& dq, const AttnOperand& dk, const AttnOperand& dv, cudaStream_t stream) {
  if (B * H == 0 || T == 0) return;
  check_grid(B, H);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const int64_t rows = B * H * T;
  Tensor delta = Tensor::empty({rows}, DType::f32, Device::cuda);  // (B·H, T)
  const dim3 grid(static_cast<unsigned>((T + kR - 1) / kR), static_cast<unsigned>(B * H));
  visit_float_dtype(dt, "causal_attention", [&](auto tag) {
    using T_ = decltype(tag);
    core_delta_kernel<T_><<<grid_for(rows, 8, INT32_MAX), 256, 0, stream>>>(dout, out, delta.data<float>(), H, T, D,
                                                                            rows);
    CHECK_LAUNCH();
    visit_width(D, [&](auto md) {
      constexpr int MD = decltype(md)::value;
      const size_t smem_kv = 2 * tile_bytes<MD>() + 2 * kR * sizeof(float), smem_q = 2 * tile_bytes<MD>();
      auto kv = core_dkdv_kernel<T_, MD>;
      allow_smem(kv, smem_kv);
      kv<<<grid, kThreads, smem_kv, stream>>>(q, k, v, dout, lse, delta.data<float>(), dk, dv, H, T, D, scale);
      CHECK_LAUNCH();
      auto kq = core_dq_kernel<T_, MD>;
      allow_smem(kq, smem_q);
      kq<<<grid, kThreads, smem_q, stream>>>(q, k, v, dout, lse, delta.data<float>(), dq, H, T, D, scale);
      CHECK_LAUNCH();
    });
  });
}

}  // namespace st::ops::cuda
