// CUDA causal attention, flash-attention style (Dao et al.): q, k, v, out (B, H, T, D), lse
// (B, H, T) f32. No T×T score matrix is ever written to global memory, for any dtype:
//   fwd:  a block of 64 query rows (one thread each) walks the key tiles s ≤ t in shared memory;
//         per tile the scores go to a per-thread shared row, the running max / sum are updated
//         once per tile (online softmax), and o accumulates in registers; lse = m + log l.
//   bwd:  Δ_t = rowsum(dO ∘ O) first; then one kernel per key block (64 keys, one thread each)
//         recomputes P = exp(S − lse) tile by tile over the queries t ≥ s and accumulates dK, dV
//         in registers; a second per query block accumulates dQ over the keys s ≤ t. Each
//         gradient element is written once (=), no atomics: deterministic.
// Scores and accumulators are f32; q, k, v are widened on their way into shared memory. These
// are the CUDA-core kernels, used for f32 and for head dims other than 64 (any D ≤ 128). f16/bf16
// first go to cuDNN's fused attention (ops/cudnn/sdpa.cpp) when ST_ATTENTION allows and cuDNN
// takes the shape, then with D = 64 (GPT-2) to the tensor-core flash kernels of
// ops/cuda/flash_attention.cu; both also serve the packed op (attention_qkv_fwd/bwd: strided views
// into qkv, no transposes).
#include "ops/attention.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/sdpa_cudnn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace st::ops::cuda {
namespace {

constexpr int kB = 64;  // rows per block (threads) and rows per shared tile

// kernels

// q, k, v, out (BH, T, D); lse (BH, T). Dynamic smem: Ks, Vs (kB, D), S (kB, kB + 1).
template <class T, int MD>
__global__ void __launch_bounds__(kB) attention_fwd_kernel(const T* q, const T* k, const T* v, T* out, float* lse,
                                                           int64_t Tn, int D, float scale) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + kB * D;
  float* S = Vs + kB * D;
  const int64_t bh = blockIdx.y;
  const int64_t t0 = blockIdx.x * (int64_t)kB, t = t0 + threadIdx.x;
  const T* qb = q + bh * Tn * D;
  const T* kb = k + bh * Tn * D;
  const T* vb = v + bh * Tn * D;
  float qr[MD], o[MD];
#pragma unroll
  for (int d = 0; d < MD; ++d) {
    qr[d] = (d < D && t < Tn) ? to_float(qb[t * D + d]) * scale : 0.f;
    o[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  float* Srow = S + threadIdx.x * (kB + 1);
  const int64_t kend = min(Tn, t0 + kB);  // keys the last row of this block sees
  for (int64_t s0 = 0; s0 < kend; s0 += kB) {
    __syncthreads();
    for (int i = threadIdx.x; i < kB * D; i += kB) {
      const int64_t s = s0 + i / D;
      Ks[i] = s < Tn ? to_float(kb[s0 * D + i]) : 0.f;
      Vs[i] = s < Tn ? to_float(vb[s0 * D + i]) : 0.f;
    }
    __syncthreads();
    const int nk = static_cast<int>(min(static_cast<int64_t>(kB), t - s0 + 1));  // keys s0..t of this tile
    float tmax = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      float acc = 0.f;
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) acc += qr[d] * Ks[j * D + d];
      Srow[j] = acc;
      tmax = fmaxf(tmax, acc);
    }
    if (nk <= 0) continue;
    const float mn = fmaxf(m, tmax);
    const float corr = expf(m - mn);
    l *= corr;
#pragma unroll
    for (int d = 0; d < MD; ++d) o[d] *= corr;
    for (int j = 0; j < nk; ++j) {
      const float p = expf(Srow[j] - mn);
      l += p;
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) o[d] += p * Vs[j * D + d];
    }
    m = mn;
  }
  if (t < Tn) {
    const float inv = 1.f / l;
    T* ob = out + bh * Tn * D + t * D;
#pragma unroll
    for (int d = 0; d < MD; ++d)
      if (d < D) ob[d] = from_float<T>(o[d] * inv);
    lse[bh * Tn + t] = m + logf(l);
  }
}

// dout, out (R, D) → delta (R) = Σ_d dout·out; one warp per row
template <class T>
__global__ void attention_delta_kernel(const T* dout, const T* out, float* delta, int64_t R, int D) {
  const int64_t r = blockIdx.x * 8LL + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= R) return;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += to_float(dout[r * D + d]) * to_float(out[r * D + d]);
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// One thread per key s: dk, dv (BH, T, D). Dynamic smem: Kp, Vp (kB, D + 1) private rows;
// Qs, dOs (kB, D) query tile; Ls, Ds (kB) its lse and delta.
template <class T, int MD>
__global__ void __launch_bounds__(kB) attention_bwd_dkdv_kernel(const T* q, const T* k, const T* v, const T* dout,
                                                                const float* lse, const float* delta, T* dk, T* dv,
                                                                int64_t Tn, int D, float scale) {
  extern __shared__ float smem[];
  const int P = D + 1;
  float* Kp = smem;
  float* Vp = Kp + kB * P;
  float* Qs = Vp + kB * P;
  float* dOs = Qs + kB * D;
  float* Ls = dOs + kB * D;
  float* Ds = Ls + kB;
  const int64_t bh = blockIdx.y, off = bh * Tn * D;
  const int64_t s0 = blockIdx.x * (int64_t)kB, s = s0 + threadIdx.x;
  for (int i = threadIdx.x; i < kB * D; i += kB) {
    const int r = i / D, d = i % D;
    const bool in = s0 + r < Tn;
    Kp[r * P + d] = in ? to_float(k[off + s0 * D + i]) : 0.f;
    Vp[r * P + d] = in ? to_float(v[off + s0 * D + i]) : 0.f;
  }
  float dkr[MD], dvr[MD];
#pragma unroll
  for (int d = 0; d < MD; ++d) dkr[d] = dvr[d] = 0.f;
  const float* kr = Kp + threadIdx.x * P;
  const float* vr = Vp + threadIdx.x * P;
  for (int64_t q0 = s0; q0 < Tn; q0 += kB) {  // queries t ≥ s0
    __syncthreads();
    for (int i = threadIdx.x; i < kB * D; i += kB) {
      const bool in = q0 + i / D < Tn;
      Qs[i] = in ? to_float(q[off + q0 * D + i]) : 0.f;
      dOs[i] = in ? to_float(dout[off + q0 * D + i]) : 0.f;
    }
    if (q0 + threadIdx.x < Tn) {
      Ls[threadIdx.x] = lse[bh * Tn + q0 + threadIdx.x];
      Ds[threadIdx.x] = delta[bh * Tn + q0 + threadIdx.x];
    }
    __syncthreads();
    if (s >= Tn) continue;
    const int nq = static_cast<int>(min(static_cast<int64_t>(kB), Tn - q0));
    for (int j = static_cast<int>(max(static_cast<int64_t>(0), s - q0)); j < nq; ++j) {  // t = q0 + j ≥ s
      float qk = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) {
          qk += Qs[j * D + d] * kr[d];
          dp += dOs[j * D + d] * vr[d];
        }
      const float p = expf(qk * scale - Ls[j]);
      const float ds = p * (dp - Ds[j]);
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) {
          dvr[d] += p * dOs[j * D + d];
          dkr[d] += ds * Qs[j * D + d];
        }
    }
  }
  if (s < Tn) {
#pragma unroll
    for (int d = 0; d < MD; ++d)
      if (d < D) {
        dk[off + s * D + d] = from_float<T>(dkr[d] * scale);
        dv[off + s * D + d] = from_float<T>(dvr[d]);
      }
  }
}

// One thread per query t: dq (BH, T, D). Dynamic smem: Qp, dOp (kB, D + 1) private rows;
// Ks, Vs (kB, D) key tile.
template <class T, int MD>
__global__ void __launch_bounds__(kB) attention_bwd_dq_kernel(const T* q, const T* k, const T* v, const T* dout,
                                                              const float* lse, const float* delta, T* dq,
                                                              int64_t Tn, int D, float scale) {
  extern __shared__ float smem[];
  const int P = D + 1;
  float* Qp = smem;
  float* dOp = Qp + kB * P;
  float* Ks = dOp + kB * P;
  float* Vs = Ks + kB * D;
  const int64_t bh = blockIdx.y, off = bh * Tn * D;
  const int64_t t0 = blockIdx.x * (int64_t)kB, t = t0 + threadIdx.x;
  for (int i = threadIdx.x; i < kB * D; i += kB) {
    const int r = i / D, d = i % D;
    const bool in = t0 + r < Tn;
    Qp[r * P + d] = in ? to_float(q[off + t0 * D + i]) : 0.f;
    dOp[r * P + d] = in ? to_float(dout[off + t0 * D + i]) : 0.f;
  }
  const float L = t < Tn ? lse[bh * Tn + t] : 0.f, Dt = t < Tn ? delta[bh * Tn + t] : 0.f;
  float dqr[MD];
#pragma unroll
  for (int d = 0; d < MD; ++d) dqr[d] = 0.f;
  const float* qr = Qp + threadIdx.x * P;
  const float* gr = dOp + threadIdx.x * P;
  const int64_t kend = min(Tn, t0 + kB);
  for (int64_t s0 = 0; s0 < kend; s0 += kB) {
    __syncthreads();
    for (int i = threadIdx.x; i < kB * D; i += kB) {
      const bool in = s0 + i / D < Tn;
      Ks[i] = in ? to_float(k[off + s0 * D + i]) : 0.f;
      Vs[i] = in ? to_float(v[off + s0 * D + i]) : 0.f;
    }
    __syncthreads();
    if (t >= Tn) continue;
    const int nk = static_cast<int>(min(static_cast<int64_t>(kB), t - s0 + 1));
    for (int j = 0; j < nk; ++j) {
      float qk = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) {
          qk += qr[d] * Ks[j * D + d];
          dp += gr[d] * Vs[j * D + d];
        }
      const float p = expf(qk * scale - L);
      const float ds = p * (dp - Dt);
#pragma unroll
      for (int d = 0; d < MD; ++d)
        if (d < D) dqr[d] += ds * Ks[j * D + d];
    }
  }
  if (t < Tn) {
#pragma unroll
    for (int d = 0; d < MD; ++d)
      if (d < D) dq[off + t * D + d] = from_float<T>(dqr[d] * scale);
  }
}

// Picks the register width MD ∈ {32, 64, 128} ≥ D.
template <class Fn>
void visit_head_dim(int D, Fn&& fn) {
  if (D <= 32) return fn(std::integral_constant<int, 32>{});
  if (D <= 64) return fn(std::integral_constant<int, 64>{});
  if (D <= 128) return fn(std::integral_constant<int, 128>{});
  ST_THROW(ShapeError, "causal_attention: the CUDA kernel takes head dims up to 128, got " << D);
}

// (B, H, T, D) contiguous as a flash operand
AttnOperand contiguous_operand(const Tensor& t) {
  const int64_t H = t.size(1), Tn = t.size(2), D = t.size(3);
  return {const_cast<void*>(t.data_ptr()), H * Tn * D, Tn * D, D};
}

// head h of part i ∈ {0 q, 1 k, 2 v} of x (B, T, parts·H·D) as a flash operand
AttnOperand packed_operand(const Tensor& x, int64_t H, int64_t D, int i) {
  const int64_t Tn = x.size(1), W = x.size(2);
  auto* p = static_cast<unsigned char*>(const_cast<void*>(x.data_ptr())) + i * H * D * dtype_size(x.dtype());
  return {p, Tn * W, D, W};
}

template <class K>
void set_smem(K kernel, size_t bytes) {
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

std::atomic<int> g_backend{-1};  // AttentionBackend, -1: not decided yet (read ST_ATTENTION)

bool deterministic() { return attention_backend() == AttentionBackend::Deterministic; }

// Runs cuDNN's fused attention when the backend allows it; false: take our kernels. With
// ST_ATTENTION=cudnn a shape cuDNN declines is an error rather than a silent fallback.
template <class Run>
bool try_cudnn(Run run) {
  const AttentionBackend b = attention_backend();
  if (b == AttentionBackend::Flash) return false;
  if (run()) return true;
  if (b == AttentionBackend::Cudnn)
    ST_THROW(DeviceError, "causal_attention: ST_ATTENTION=cudnn but cuDNN declined the shape (" << cudnn_sdpa_status()
                                                                                                 << ")");
  return false;
}

}  // namespace

AttentionBackend attention_backend() {
  int b = g_backend.load();
  if (b < 0) {
    const char* e = std::getenv("ST_ATTENTION");
    if (!e || !*e || !std::strcmp(e, "deterministic"))
      b = static_cast<int>(AttentionBackend::Deterministic);
    else if (!std::strcmp(e, "fast"))
      b = static_cast<int>(AttentionBackend::Fast);
    else if (!std::strcmp(e, "cudnn"))
      b = static_cast<int>(AttentionBackend::Cudnn);
    else if (!std::strcmp(e, "flash"))
      b = static_cast<int>(AttentionBackend::Flash);
    else
      ST_THROW(ValueError, "ST_ATTENTION=" << e << ": expected deterministic, fast, cudnn or flash");
    g_backend.store(b);
  }
  return static_cast<AttentionBackend>(b);
}

void set_attention_backend(AttentionBackend b) { g_backend.store(static_cast<int>(b)); }

// launchers

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  check_contiguous_cuda("causal_attention", {&q, &k, &v, &out, &lse});
  const int64_t BH = q.size(0) * q.size(1), Tn = q.size(2);
  const int D = static_cast<int>(q.size(3));
  if (BH == 0 || Tn == 0) return;
  {
    AttnOperand oq = contiguous_operand(q), ok = contiguous_operand(k), ov = contiguous_operand(v),
                oo = contiguous_operand(out);
    if (try_cudnn([&] {
          return cudnn_sdpa_fwd(q.dtype(), q.size(0), q.size(1), Tn, D, oq, ok, ov, oo, lse.data<float>(),
                                current_stream());
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo}))
      return flash_attention_fwd(q.dtype(), q.size(0), q.size(1), Tn, oq, ok, ov, oo, lse.data<float>(),
                                 current_stream());
  }
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const dim3 grid(static_cast<unsigned>((Tn + kB - 1) / kB), static_cast<unsigned>(BH));
  const size_t smem = (2 * kB * D + kB * (kB + 1)) * sizeof(float);
  visit_float_dtype(q.dtype(), "causal_attention", [&](auto tag) {
    using T = decltype(tag);
    visit_head_dim(D, [&](auto md) {
      auto kernel = attention_fwd_kernel<T, decltype(md)::value>;
      set_smem(kernel, smem);
      kernel<<<grid, kB, smem, current_stream()>>>(static_cast<const T*>(q.data_ptr()),
                                                   static_cast<const T*>(k.data_ptr()),
                                                   static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()),
                                                   lse.data<float>(), Tn, D, scale);
      CHECK_LAUNCH();
    });
  });
}

void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_contiguous_cuda("causal_attention", {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv});
  const int64_t BH = q.size(0) * q.size(1), Tn = q.size(2);
  const int D = static_cast<int>(q.size(3));
  if (BH == 0 || Tn == 0) return;
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  cudaStream_t stream = current_stream();
  {
    AttnOperand oq = contiguous_operand(q), ok = contiguous_operand(k), ov = contiguous_operand(v),
                oo = contiguous_operand(out), og = contiguous_operand(dout), dq_ = contiguous_operand(dq),
                dk_ = contiguous_operand(dk), dv_ = contiguous_operand(dv);
    if (try_cudnn([&] {
          return cudnn_sdpa_bwd(q.dtype(), q.size(0), q.size(1), Tn, D, oq, ok, ov, oo, og, lse.data<float>(), dq_,
                                dk_, dv_, deterministic(), stream);
        }))
      return;
    if (flash_attention_supported(q.dtype(), D, BH, {oq, ok, ov, oo, og, dq_, dk_, dv_}))
      return flash_attention_bwd(q.dtype(), q.size(0), q.size(1), Tn, oq, ok, ov, oo, og, lse.data<float>(), dq_,
                                 dk_, dv_, stream);
  }
  Tensor delta = Tensor::empty({BH, Tn}, DType::f32, Device::cuda);  // (BH, T)
  const dim3 grid(static_cast<unsigned>((Tn + kB - 1) / kB), static_cast<unsigned>(BH));
  const size_t smem_kv = (2 * kB * (D + 1) + 2 * kB * D + 2 * kB) * sizeof(float);
  const size_t smem_q = (2 * kB * (D + 1) + 2 * kB * D) * sizeof(float);
  visit_float_dtype(q.dtype(), "causal_attention", [&](auto tag) {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(q.data_ptr());
    const T* pk = static_cast<const T*>(k.data_ptr());
    const T* pv = static_cast<const T*>(v.data_ptr());
    const T* pg = static_cast<const T*>(dout.data_ptr());
    attention_delta_kernel<T><<<grid_for(BH * Tn, 8, INT32_MAX), 256, 0, stream>>>(
        pg, static_cast<const T*>(out.data_ptr()), delta.data<float>(), BH * Tn, D);
    CHECK_LAUNCH();
    visit_head_dim(D, [&](auto md) {
      constexpr int MD = decltype(md)::value;
      auto kv = attention_bwd_dkdv_kernel<T, MD>;
      set_smem(kv, smem_kv);
      kv<<<grid, kB, smem_kv, stream>>>(pq, pk, pv, pg, lse.data<float>(), delta.data<float>(),
                                        static_cast<T*>(dk.data_ptr()), static_cast<T*>(dv.data_ptr()), Tn, D, scale);
      CHECK_LAUNCH();
      auto kq = attention_bwd_dq_kernel<T, MD>;
      set_smem(kq, smem_q);
      kq<<<grid, kB, smem_q, stream>>>(pq, pk, pv, pg, lse.data<float>(), delta.data<float>(),
                                       static_cast<T*>(dq.data_ptr()), Tn, D, scale);
      CHECK_LAUNCH();
    });
  });
}

// qkv (B, T, 3·H·D) → out (B, T, H·D), lse (B·H, T): the flash kernels on strided views
bool attention_qkv_supported(const Tensor& qkv, const Tensor& out, int64_t heads) {
  const int64_t D = qkv.size(2) / (3 * heads);
  return flash_attention_supported(qkv.dtype(), D, qkv.size(0) * heads,
                                   {packed_operand(qkv, heads, D, 0), packed_operand(out, heads, D, 0)});
}

void attention_qkv_fwd(const Tensor& qkv, Tensor& out, Tensor& lse, int64_t heads) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse});
  const int64_t D = qkv.size(2) / (3 * heads);
  const AttnOperand q = packed_operand(qkv, heads, D, 0), k = packed_operand(qkv, heads, D, 1),
                    v = packed_operand(qkv, heads, D, 2), o = packed_operand(out, heads, D, 0);
  if (try_cudnn([&] {
        return cudnn_sdpa_fwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), D, q, k, v, o, lse.data<float>(),
                              current_stream());
      }))
    return;
  flash_attention_fwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), q, k, v, o, lse.data<float>(), current_stream());
}

void attention_qkv_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv,
                       int64_t heads) {
  check_contiguous_cuda("causal_attention_qkv", {&qkv, &out, &lse, &dout, &dqkv});
  const int64_t D = qkv.size(2) / (3 * heads);
  const AttnOperand q = packed_operand(qkv, heads, D, 0), k = packed_operand(qkv, heads, D, 1),
                    v = packed_operand(qkv, heads, D, 2), o = packed_operand(out, heads, D, 0),
                    g = packed_operand(dout, heads, D, 0), dq = packed_operand(dqkv, heads, D, 0),
                    dk = packed_operand(dqkv, heads, D, 1), dv = packed_operand(dqkv, heads, D, 2);
  if (try_cudnn([&] {
        return cudnn_sdpa_bwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), D, q, k, v, o, g, lse.data<float>(), dq,
                              dk, dv, deterministic(), current_stream());
      }))
    return;
  flash_attention_bwd(qkv.dtype(), qkv.size(0), heads, qkv.size(1), q, k, v, o, g, lse.data<float>(), dq, dk, dv,
                      current_stream());
}

}  // namespace st::ops::cuda
