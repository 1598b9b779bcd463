// CUDA layer normalisation over the last dim, fused per direction:
//   fwd: one warp per row (N, C): mean, then the centred variance (a second pass over the row),
//        then y = (x − mean)·rstd·w + b; saves mean, rstd (N) f32. Rows of whole 16-byte packs
//        take the vectorised twins of the row kernels; with C ≤ 1024 the row stays in registers.
//   bwd: dx in one warp per row (Σ g and Σ g·n̂ with g = dy·w, llm.c's formula), written (=);
//        dw = Σ_rows dy·n̂ and db = Σ_rows dy, written (=), as partials (S, C) in f32 over S
//        slices of rows, then a fixed-order sum over the slices. Rows of whole 16-byte packs with
//        C ≤ 1024 take one fused kernel: each block's warps walk its slice of rows writing dx,
//        every lane keeping the dw/db sums of its own columns in registers, then the block adds
//        its warps' sums in warp order. Other rows take the dx kernel and a column kernel (32
//        columns × 8 row lanes per block). No atomics, so dw/db are bit-reproducible run to run.
#include "ops/cuda/common.cuh"
#include "ops/layernorm.h"

namespace st::ops::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels

// kernels

// x, y (N, C); w, b (C); mean, rstd (N)
template <class T>
__global__ void layernorm_fwd_kernel(const T* x, const T* w, const T* b, float eps, T* y, float* mean, float* rstd,
                                     int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const T* xr = x + r * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += to_float(xr[c]);
  const float mu = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = to_float(xr[c]) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + r * C;
  for (int64_t c = lane; c < C; c += 32)
    yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * to_float(w[c]) + to_float(b[c]));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// x, dy, dx (N, C); w (C); mean, rstd (N)
template <class T>
__global__ void layernorm_bwd_dx_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy,
                                        T* dx, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const T* xr = x + r * C;
  const T* gr = dy + r * C;
  const float mu = mean[r], rs = rstd[r];
  float sg = 0.f, sgn = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = to_float(gr[c]) * to_float(w[c]);
    sg += g;
    sgn += g * (to_float(xr[c]) - mu) * rs;
  }
  const float mg = warp_sum(sg) / static_cast<float>(C), mgn = warp_sum(sgn) / static_cast<float>(C);
  T* dr = dx + r * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = to_float(gr[c]) * to_float(w[c]);
    const float nh = (to_float(xr[c]) - mu) * rs;
    dr[c] = from_float<T>(rs * (g - mg - nh * mgn));
  }
}

// Vectorised twins of the two row kernels for rows that are whole 16-byte packs (C a multiple of
// 8 halves / 4 floats, 16-byte aligned bases): each lane moves 16 bytes per load.
template <class T>
__global__ void layernorm_fwd_vec_kernel(const T* x, const T* w, const T* b, float eps, T* y, float* mean,
                                         float* rstd, int64_t N, int64_t C) {
  using st::cuda::load_pack;
  using st::cuda::Pack;
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t P = C / NP;
  const T* xr = x + r * C;
  float s = 0.f;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP);
#pragma unroll
    for (int j = 0; j < NP; ++j) s += to_float(xv.v[j]);
  }
  const float mu = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const float d = to_float(xv.v[j]) - mu;
      v += d * d;
    }
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + r * C;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP), wv = load_pack(w + p * NP), bv = load_pack(b + p * NP), o;
#pragma unroll
    for (int j = 0; j < NP; ++j)
      o.v[j] = from_float<T>((to_float(xv.v[j]) - mu) * rs * to_float(wv.v[j]) + to_float(bv.v[j]));
    st::cuda::store_pack(yr + p * NP, o);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// Register-resident forward for rows of whole packs with C ≤ 32·K·NP: lane l holds packs l + 32·k
// (k < K) of its row, so x is read from memory once and all K loads are in flight together.
template <class T, int K>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_fwd_reg_kernel(const T* x, const T* w, const T* b, float eps, T* y, float* mean, float* rstd,
                             int64_t N, int64_t C) {
  using st::cuda::load_pack;
  using st::cuda::Pack;
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int P = static_cast<int>(C / NP);
  const T* xr = x + r * C;
  Pack<T> xv[K];
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < P) xv[k] = load_pack(xr + (lane + 32 * k) * NP);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < P)
#pragma unroll
      for (int j = 0; j < NP; ++j) s += to_float(xv[k].v[j]);
  const float mu = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < P)
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const float d = to_float(xv[k].v[j]) - mu;
        v += d * d;
      }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + r * C;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int p = lane + 32 * k;
    if (p >= P) continue;
    Pack<T> wv = load_pack(w + p * NP), bv = load_pack(b + p * NP), o;
#pragma unroll
    for (int j = 0; j < NP; ++j)
      o.v[j] = from_float<T>((to_float(xv[k].v[j]) - mu) * rs * to_float(wv.v[j]) + to_float(bv.v[j]));
    st::cuda::store_pack(yr + p * NP, o);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <class T>
__global__ void layernorm_bwd_dx_vec_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy,
                                            T* dx, int64_t N, int64_t C) {
  using st::cuda::load_pack;
  using st::cuda::Pack;
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t P = C / NP;
  const T* xr = x + r * C;
  const T* gr = dy + r * C;
  const float mu = mean[r], rs = rstd[r];
  float sg = 0.f, sgn = 0.f;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP), gv = load_pack(gr + p * NP), wv = load_pack(w + p * NP);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const float g = to_float(gv.v[j]) * to_float(wv.v[j]);
      sg += g;
      sgn += g * (to_float(xv.v[j]) - mu) * rs;
    }
  }
  const float mg = warp_sum(sg) / static_cast<float>(C), mgn = warp_sum(sgn) / static_cast<float>(C);
  T* dr = dx + r * C;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP), gv = load_pack(gr + p * NP), wv = load_pack(w + p * NP), o;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const float g = to_float(gv.v[j]) * to_float(wv.v[j]);
      o.v[j] = from_float<T>(rs * (g - mg - (to_float(xv.v[j]) - mu) * rs * mgn));
    }
    st::cuda::store_pack(dr + p * NP, o);
  }
}

// Fused dx and dw/db partials for rows of whole packs: slice blockIdx.x holds rows_per_slice rows;
// warp w takes rows w, w + 8, ... of it. Lane l owns packs l + 32·k (k < K) of every row, so its
// dw/db sums stay in registers. part_w, part_b (S, C) f32; dynamic shared memory 8·C floats.
template <class T, int K>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_bwd_fused_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy, T* dx,
                               float* part_w, float* part_b, int64_t N, int64_t C, int64_t rows_per_slice) {
  using st::cuda::load_pack;
  using st::cuda::Pack;
  constexpr int NP = Pack<T>::N;
  extern __shared__ float red[];  // (kRowsPerBlock, C): one warp's partials per row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int P = static_cast<int>(C / NP);
  float aw[K][NP], ab[K][NP];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < NP; ++j) aw[k][j] = ab[k][j] = 0.f;
  const int64_t r0 = blockIdx.x * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
  for (int64_t r = r0 + warp; r < r1; r += kRowsPerBlock) {
    const T* xr = x + r * C;
    const T* gr = dy + r * C;
    const float mu = mean[r], rs = rstd[r];
    Pack<T> xv[K], gv[K];  // the lane's packs of the row, loaded together, used by both passes
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane + 32 * k < P) {
        xv[k] = load_pack(xr + (lane + 32 * k) * NP);
        gv[k] = load_pack(gr + (lane + 32 * k) * NP);
      }
    float sg = 0.f, sgn = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = lane + 32 * k;
      if (p >= P) continue;
      Pack<T> wv = load_pack(w + p * NP);
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const float d = to_float(gv[k].v[j]), nh = (to_float(xv[k].v[j]) - mu) * rs, g = d * to_float(wv.v[j]);
        sg += g;
        sgn += g * nh;
        aw[k][j] += d * nh;
        ab[k][j] += d;
      }
    }
    const float mg = warp_sum(sg) / static_cast<float>(C), mgn = warp_sum(sgn) / static_cast<float>(C);
    T* dr = dx + r * C;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = lane + 32 * k;
      if (p >= P) continue;
      Pack<T> wv = load_pack(w + p * NP), o;
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const float g = to_float(gv[k].v[j]) * to_float(wv.v[j]);
        o.v[j] = from_float<T>(rs * (g - mg - (to_float(xv[k].v[j]) - mu) * rs * mgn));
      }
      st::cuda::store_pack(dr + p * NP, o);
    }
  }
  // the block's partials: Σ over its warps in warp order, dw then db through the same buffer
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = lane + 32 * k;
      if (p >= P) continue;
#pragma unroll
      for (int j = 0; j < NP; ++j) red[warp * C + p * NP + j] = pass == 0 ? aw[k][j] : ab[k][j];
    }
    __syncthreads();
    float* part = pass == 0 ? part_w : part_b;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float t = 0.f;
      for (int v = 0; v < kRowsPerBlock; ++v) t += red[v * C + c];
      part[blockIdx.x * C + c] = t;
    }
    __syncthreads();
  }
}

// Column partial sums over the rows of slice blockIdx.y: part_w, part_b (S, C) f32.
// Block (32, 8): threadIdx.x a column of the tile, threadIdx.y a row lane.
template <class T>
__global__ void layernorm_bwd_dwdb_partial_kernel(const T* x, const float* mean, const float* rstd, const T* dy,
                                                  float* part_w, float* part_b, int64_t N, int64_t C,
                                                  int64_t rows_per_slice) {
  __shared__ float sw[8][33], sb[8][33];
  const int64_t c = blockIdx.x * 32LL + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
  float aw = 0.f, ab = 0.f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float g = to_float(dy[r * C + c]);
      aw += g * (to_float(x[r * C + c]) - mean[r]) * rstd[r];
      ab += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.f, tb = 0.f;
    for (int k = 0; k < 8; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    part_w[blockIdx.y * C + c] = tw;
    part_b[blockIdx.y * C + c] = tb;
  }
}

// part_w, part_b (S, C) → dw, db (C) in a fixed order: lane y of a (32 columns × 8 lanes) block
// sums partials s ≡ y (mod 8) in order, then lane 0 adds the 8 lane sums in lane order
// (deterministic; 8 short chains instead of one chain of S dependent loads per column)
constexpr int kFinalCols = 32, kFinalLanes = 8;
template <class T>
__global__ void layernorm_bwd_dwdb_final_kernel(const float* part_w, const float* part_b, int64_t S, int64_t C, T* dw,
                                                T* db) {
  __shared__ float sw[kFinalLanes][kFinalCols], sb[kFinalLanes][kFinalCols];
  const int64_t c = blockIdx.x * int64_t(kFinalCols) + threadIdx.x;
  float tw = 0.f, tb = 0.f;
  if (c < C)
    for (int64_t s = threadIdx.y; s < S; s += kFinalLanes) {
      tw += part_w[s * C + c];
      tb += part_b[s * C + c];
    }
  sw[threadIdx.y][threadIdx.x] = tw;
  sb[threadIdx.y][threadIdx.x] = tb;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int l = 1; l < kFinalLanes; ++l) {
    tw += sw[l][threadIdx.x];
    tb += sb[l][threadIdx.x];
  }
  dw[c] = from_float<T>(tw);
  db[c] = from_float<T>(tb);
}

template <class T>
bool vec_ok(int64_t C, std::initializer_list<const Tensor*> ts) {
  if (C % st::cuda::Pack<T>::N != 0) return false;
  for (const Tensor* t : ts)
    if (!st::cuda::aligned16(t->data_ptr())) return false;
  return true;
}

template <class T, int K>
void layernorm_bwd_fused(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                         Tensor& dx, Tensor& part_w, Tensor& part_b, int64_t N, int64_t C, int64_t S,
                         int64_t rows_per_slice, cudaStream_t stream) {
  const size_t smem = sizeof(float) * kRowsPerBlock * static_cast<size_t>(C);  // ≤ 32 KiB for C ≤ 1024
  layernorm_bwd_fused_kernel<T, K><<<static_cast<unsigned>(S), 32 * kRowsPerBlock, smem, stream>>>(
      static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), mean.data<float>(), rstd.data<float>(),
      static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()), part_w.data<float>(),
      part_b.data<float>(), N, C, rows_per_slice);
  CHECK_LAUNCH();
}

}  // namespace

// launchers

void layernorm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  check_contiguous_cuda("layernorm", {&x, &w, &b, &y, &mean, &rstd});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  if (N == 0) return;
  visit_float_dtype(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    constexpr int NP = st::cuda::Pack<T>::N;
    const bool vec = vec_ok<T>(C, {&x, &w, &b, &y});
    auto kernel = vec ? layernorm_fwd_vec_kernel<T> : layernorm_fwd_kernel<T>;
    if (vec && C <= 1024)  // register-resident: K = ⌈C / (32·NP)⌉ packs per lane, in steps of 8 columns
      switch (((C + 31) / 32 + 7) / 8) {
        case 1: kernel = layernorm_fwd_reg_kernel<T, 8 / NP>; break;
        case 2: kernel = layernorm_fwd_reg_kernel<T, 16 / NP>; break;
        case 3: kernel = layernorm_fwd_reg_kernel<T, 24 / NP>; break;
        default: kernel = layernorm_fwd_reg_kernel<T, 32 / NP>; break;
      }
    kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<const T*>(b.data_ptr()),
        eps, static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>(), N, C);
    CHECK_LAUNCH();
  });
}

void layernorm_bwd(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db) {
  check_contiguous_cuda("layernorm", {&x, &w, &mean, &rstd, &dy, &dx, &dw, &db});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  if (C == 0) return;
  cudaStream_t stream = current_stream();
  visit_float_dtype(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    constexpr int NP = st::cuda::Pack<T>::N;
    // fused path: each lane owns 8·cols8 columns (cols8 = 1..4, K = 8·cols8 / NP packs)
    const int64_t cols8 = ((C + 31) / 32 + 7) / 8;
    const bool fused = N > 0 && C <= 1024 && vec_ok<T>(C, {&x, &w, &dy, &dx});
    // Slices: enough blocks to fill the GPU (~4 per SM over the column tiles; fused: one tile,
    // ~2 blocks per SM, which its registers allow), ≥ 32 rows each.
    const int64_t tiles = fused ? 1 : (C + 31) / 32, target = fused ? 2 * 132 : 4 * 132;
    int64_t S = std::max<int64_t>(1, std::min<int64_t>((target + tiles - 1) / tiles, (N + 31) / 32));
    S = std::min<int64_t>(S, 65535);
    const int64_t rows_per_slice = N > 0 ? (N + S - 1) / S : 1;
    Tensor part_w = Tensor::empty({S, C}, DType::f32, Device::cuda);  // (S, C)
    Tensor part_b = Tensor::empty({S, C}, DType::f32, Device::cuda);  // (S, C)
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pdy = static_cast<const T*>(dy.data_ptr());
    if (fused) {
      switch (cols8) {
        case 1: layernorm_bwd_fused<T, 8 / NP>(x, w, mean, rstd, dy, dx, part_w, part_b, N, C, S, rows_per_slice, stream); break;
        case 2: layernorm_bwd_fused<T, 16 / NP>(x, w, mean, rstd, dy, dx, part_w, part_b, N, C, S, rows_per_slice, stream); break;
        case 3: layernorm_bwd_fused<T, 24 / NP>(x, w, mean, rstd, dy, dx, part_w, part_b, N, C, S, rows_per_slice, stream); break;
        default: layernorm_bwd_fused<T, 32 / NP>(x, w, mean, rstd, dy, dx, part_w, part_b, N, C, S, rows_per_slice, stream); break;
      }
    } else {
      if (N > 0) {
        auto kernel = vec_ok<T>(C, {&x, &w, &dy, &dx}) ? layernorm_bwd_dx_vec_kernel<T> : layernorm_bwd_dx_kernel<T>;
        kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, stream>>>(
            px, static_cast<const T*>(w.data_ptr()), mean.data<float>(), rstd.data<float>(), pdy,
            static_cast<T*>(dx.data_ptr()), N, C);
        CHECK_LAUNCH();
      }
      layernorm_bwd_dwdb_partial_kernel<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(S)), dim3(32, 8), 0,
                                             stream>>>(px, mean.data<float>(), rstd.data<float>(), pdy,
                                                       part_w.data<float>(), part_b.data<float>(), N, C, rows_per_slice);
      CHECK_LAUNCH();
    }
    layernorm_bwd_dwdb_final_kernel<T><<<static_cast<unsigned>((C + kFinalCols - 1) / kFinalCols),
                                         dim3(kFinalCols, kFinalLanes), 0, stream>>>(
        part_w.data<float>(), part_b.data<float>(), S, C, static_cast<T*>(dw.data_ptr()),
        static_cast<T*>(db.data_ptr()));
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
