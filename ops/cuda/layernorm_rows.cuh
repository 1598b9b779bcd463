// The layernorm row kernels, shared by ops::layernorm (ops/cuda/layernorm.cu) and the fused
// residual add + layernorm (ops/cuda/add_layernorm.cu), so that both reduce in one order:
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
// Two policies make the kernels serve both ops without touching their arithmetic:
//   Src  (forward) where row element i = row·C + c comes from: first(i) / first_pack(i) on the
//        first pass over a row, again(i) / again_pack(i) on later passes (the same values);
//        LnRowsOfX reads x. kMinBlocks: the register-resident kernel's minimum blocks per SM.
//   Sink (backward) what happens to dx element i, handed over in f32 before any rounding:
//        put(i, v), put_pack(i, v[NP]); LnDxStore rounds it into dx. min_blocks<K>(): the fused
//        kernel's minimum blocks per SM.
//   (0 leaves the register budget to ptxas, as layernorm always did; the fused op's policies
//   name the occupancy layernorm's kernels reach, so that ptxas neither spills nor takes more.)
// A lane touches the same elements of its row on every pass, so a Src may re-read what its
// first pass wrote.
#pragma once
#include "ops/cuda/common.cuh"

namespace st::ops::cuda::ln_rows {

using st::cuda::load_pack;
using st::cuda::Pack;
using st::cuda::store_pack;

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels

// policies of ops::layernorm

template <class T>
struct LnRowsOfX {
  static constexpr int kMinBlocks = 0;  // the register-resident kernel's __launch_bounds__ (0: none)
  const T* x;  // (N, C)
  __device__ float first(int64_t i) const { return to_float(x[i]); }
  __device__ float again(int64_t i) const { return to_float(x[i]); }
  __device__ Pack<T> first_pack(int64_t i) const { return load_pack(x + i); }
  __device__ Pack<T> again_pack(int64_t i) const { return load_pack(x + i); }
};

template <class T>
struct LnDxStore {
  template <int K>
  static constexpr int min_blocks() { return 0; }  // the fused kernel's __launch_bounds__ (0: none)
  T* dx;  // (N, C)
  __device__ void put(int64_t i, float v) const { dx[i] = from_float<T>(v); }
  __device__ void put_pack(int64_t i, const float (&v)[Pack<T>::N]) const {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) o.v[j] = from_float<T>(v[j]);
    store_pack(dx + i, o);
  }
};

// kernels

// rows of src (N, C) → y (N, C); w, b (C); mean, rstd (N)
template <class T, class Src>
__global__ void layernorm_fwd_kernel(Src src, const T* w, const T* b, float eps, T* y, float* mean, float* rstd,
                                     int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t row = r * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += src.first(row + c);
  const float mu = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = src.again(row + c) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + row;
  for (int64_t c = lane; c < C; c += 32)
    yr[c] = from_float<T>((src.again(row + c) - mu) * rs * to_float(w[c]) + to_float(b[c]));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// x, dy (N, C) → dx (N, C) through the sink; w (C); mean, rstd (N)
template <class T, class Sink>
__global__ void layernorm_bwd_dx_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy,
                                        Sink sink, int64_t N, int64_t C) {
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
  for (int64_t c = lane; c < C; c += 32) {
    const float g = to_float(gr[c]) * to_float(w[c]);
    const float nh = (to_float(xr[c]) - mu) * rs;
    sink.put(r * C + c, rs * (g - mg - nh * mgn));
  }
}

// Vectorised twins of the two row kernels for rows that are whole 16-byte packs (C a multiple of
// 8 halves / 4 floats, 16-byte aligned bases): each lane moves 16 bytes per load.
template <class T, class Src>
__global__ void layernorm_fwd_vec_kernel(Src src, const T* w, const T* b, float eps, T* y, float* mean, float* rstd,
                                         int64_t N, int64_t C) {
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t P = C / NP, row = r * C;
  float s = 0.f;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = src.first_pack(row + p * NP);
#pragma unroll
    for (int j = 0; j < NP; ++j) s += to_float(xv.v[j]);
  }
  const float mu = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = src.again_pack(row + p * NP);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const float d = to_float(xv.v[j]) - mu;
      v += d * d;
    }
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + row;
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = src.again_pack(row + p * NP), wv = load_pack(w + p * NP), bv = load_pack(b + p * NP), o;
#pragma unroll
    for (int j = 0; j < NP; ++j)
      o.v[j] = from_float<T>((to_float(xv.v[j]) - mu) * rs * to_float(wv.v[j]) + to_float(bv.v[j]));
    store_pack(yr + p * NP, o);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// Register-resident forward for rows of whole packs with C ≤ 32·K·NP: lane l holds packs l + 32·k
// (k < K) of its row, so the row is read once and all K loads are in flight together.
template <class T, int K, class Src>
__global__ void __launch_bounds__(32 * kRowsPerBlock, Src::kMinBlocks)
    layernorm_fwd_reg_kernel(Src src, const T* w, const T* b, float eps, T* y, float* mean, float* rstd, int64_t N,
                             int64_t C) {
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int P = static_cast<int>(C / NP);
  const int64_t row = r * C;
  Pack<T> xv[K];
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < P) xv[k] = src.first_pack(row + (lane + 32 * k) * NP);
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
  T* yr = y + row;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int p = lane + 32 * k;
    if (p >= P) continue;
    Pack<T> wv = load_pack(w + p * NP), bv = load_pack(b + p * NP), o;
#pragma unroll
    for (int j = 0; j < NP; ++j)
      o.v[j] = from_float<T>((to_float(xv[k].v[j]) - mu) * rs * to_float(wv.v[j]) + to_float(bv.v[j]));
    store_pack(yr + p * NP, o);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <class T, class Sink>
__global__ void layernorm_bwd_dx_vec_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy,
                                            Sink sink, int64_t N, int64_t C) {
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
  for (int64_t p = lane; p < P; p += 32) {
    Pack<T> xv = load_pack(xr + p * NP), gv = load_pack(gr + p * NP), wv = load_pack(w + p * NP);
    float o[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const float g = to_float(gv.v[j]) * to_float(wv.v[j]);
      o[j] = rs * (g - mg - (to_float(xv.v[j]) - mu) * rs * mgn);
    }
    sink.put_pack(r * C + p * NP, o);
  }
}

// Fused dx and dw/db partials for rows of whole packs: slice blockIdx.x holds rows_per_slice rows;
// warp w takes rows w, w + 8, ... of it. Lane l owns packs l + 32·k (k < K) of every row, so its
// dw/db sums stay in registers. part_w, part_b (S, C) f32; dynamic shared memory 8·C floats.
template <class T, int K, class Sink>
__global__ void __launch_bounds__(32 * kRowsPerBlock, Sink::template min_blocks<K>())
    layernorm_bwd_fused_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy, Sink sink,
                               float* part_w, float* part_b, int64_t N, int64_t C, int64_t rows_per_slice) {
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
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = lane + 32 * k;
      if (p >= P) continue;
      Pack<T> wv = load_pack(w + p * NP);
      float o[NP];
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const float g = to_float(gv[k].v[j]) * to_float(wv.v[j]);
        o[j] = rs * (g - mg - (to_float(xv[k].v[j]) - mu) * rs * mgn);
      }
      sink.put_pack(r * C + p * NP, o);
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

// launchers

// Whether rows of C elements can take the vectorised kernels: C whole packs and every (defined)
// tensor 16-byte aligned.
template <class T>
bool vec_ok(int64_t C, std::initializer_list<const Tensor*> ts) {
  if (C % Pack<T>::N != 0) return false;
  for (const Tensor* t : ts)
    if (t->defined() && !st::cuda::aligned16(t->data_ptr())) return false;
  return true;
}

// rows of src (N, C) → y (N, C), mean, rstd (N); vec: the rows (src's tensors), w, b, y pass vec_ok
template <class T, class Src>
void layernorm_fwd_rows(const Src& src, const T* w, const T* b, float eps, T* y, float* mean, float* rstd, int64_t N,
                        int64_t C, bool vec, cudaStream_t stream) {
  if (N == 0) return;
  constexpr int NP = Pack<T>::N;
  auto kernel = vec ? layernorm_fwd_vec_kernel<T, Src> : layernorm_fwd_kernel<T, Src>;
  if (vec && C <= 1024)  // register-resident: K = ⌈C / (32·NP)⌉ packs per lane, in steps of 8 columns
    switch (((C + 31) / 32 + 7) / 8) {
      case 1: kernel = layernorm_fwd_reg_kernel<T, 8 / NP, Src>; break;
      case 2: kernel = layernorm_fwd_reg_kernel<T, 16 / NP, Src>; break;
      case 3: kernel = layernorm_fwd_reg_kernel<T, 24 / NP, Src>; break;
      default: kernel = layernorm_fwd_reg_kernel<T, 32 / NP, Src>; break;
    }
  kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, stream>>>(src, w, b, eps, y, mean, rstd, N,
                                                                                   C);
  CHECK_LAUNCH();
}

template <class T, int K, class Sink>
void layernorm_bwd_fused(const T* x, const T* w, const float* mean, const float* rstd, const T* dy, const Sink& sink,
                         float* part_w, float* part_b, int64_t N, int64_t C, int64_t S, int64_t rows_per_slice,
                         cudaStream_t stream) {
  const size_t smem = sizeof(float) * kRowsPerBlock * static_cast<size_t>(C);  // ≤ 32 KiB for C ≤ 1024
  layernorm_bwd_fused_kernel<T, K, Sink><<<static_cast<unsigned>(S), 32 * kRowsPerBlock, smem, stream>>>(
      x, w, mean, rstd, dy, sink, part_w, part_b, N, C, rows_per_slice);
  CHECK_LAUNCH();
}

// x, dy (N, C) → dx (N, C) through the sink, dw, db (C) written (=); vec: x, dy, w and the sink's
// tensors pass vec_ok. Launches: 2 (fused dx + partials, final sum) or 3 (dx, partials, final).
template <class T, class Sink>
void layernorm_bwd_rows(const T* x, const T* w, const float* mean, const float* rstd, const T* dy, const Sink& sink,
                        T* dw, T* db, int64_t N, int64_t C, bool vec, cudaStream_t stream) {
  if (C == 0) return;
  constexpr int NP = Pack<T>::N;
  // fused path: each lane owns 8·cols8 columns (cols8 = 1..4, K = 8·cols8 / NP packs)
  const int64_t cols8 = ((C + 31) / 32 + 7) / 8;
  const bool fused = N > 0 && C <= 1024 && vec;
  // Slices: enough blocks to fill the GPU (~4 per SM over the column tiles; fused: one tile,
  // ~2 blocks per SM, which its registers allow), ≥ 32 rows each.
  const int64_t tiles = fused ? 1 : (C + 31) / 32, target = fused ? 2 * 132 : 4 * 132;
  int64_t S = std::max<int64_t>(1, std::min<int64_t>((target + tiles - 1) / tiles, (N + 31) / 32));
  S = std::min<int64_t>(S, 65535);
  const int64_t rows_per_slice = N > 0 ? (N + S - 1) / S : 1;
  Tensor part_w_t = Tensor::empty({S, C}, DType::f32, Device::cuda);  // (S, C)
  Tensor part_b_t = Tensor::empty({S, C}, DType::f32, Device::cuda);  // (S, C)
  float *part_w = part_w_t.data<float>(), *part_b = part_b_t.data<float>();
  if (fused) {
    switch (cols8) {
      case 1: layernorm_bwd_fused<T, 8 / NP>(x, w, mean, rstd, dy, sink, part_w, part_b, N, C, S, rows_per_slice, stream); break;
      case 2: layernorm_bwd_fused<T, 16 / NP>(x, w, mean, rstd, dy, sink, part_w, part_b, N, C, S, rows_per_slice, stream); break;
      case 3: layernorm_bwd_fused<T, 24 / NP>(x, w, mean, rstd, dy, sink, part_w, part_b, N, C, S, rows_per_slice, stream); break;
      default: layernorm_bwd_fused<T, 32 / NP>(x, w, mean, rstd, dy, sink, part_w, part_b, N, C, S, rows_per_slice, stream); break;
    }
  } else {
    if (N > 0) {
      auto kernel = vec ? layernorm_bwd_dx_vec_kernel<T, Sink> : layernorm_bwd_dx_kernel<T, Sink>;
      kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, stream>>>(x, w, mean, rstd, dy, sink, N, C);
      CHECK_LAUNCH();
    }
    layernorm_bwd_dwdb_partial_kernel<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(S)), dim3(32, 8), 0,
                                           stream>>>(x, mean, rstd, dy, part_w, part_b, N, C, rows_per_slice);
    CHECK_LAUNCH();
  }
  layernorm_bwd_dwdb_final_kernel<T><<<static_cast<unsigned>((C + kFinalCols - 1) / kFinalCols),
                                       dim3(kFinalCols, kFinalLanes), 0, stream>>>(part_w, part_b, S, C, dw, db);
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda::ln_rows
