// The RMS norm row kernels, shared by ops::rmsnorm (ops/cuda/rmsnorm.cu) and the fused residual
// add + RMS norm (ops/cuda/add_rmsnorm.cu), so that both reduce in one order:
//   fwd: one warp per row (N, C): Σ x² (each square and sum rounded on its own), rstd =
//        rsqrtf(Σ/C + eps), then y = w·round_T(x·rstd) (a second pass over the row); saves rstd
//        (N) f32.
//   bwd: dx in one warp per row (Σ g·n̂ with g = dy·w, n̂ = x·rstd), written (=); dw = Σ_rows
//        dy·round_T(n̂), written (=), as partials (S, C) in f32 over S slices of rows (32 columns ×
//        8 row lanes per block), then a fixed-order sum over the slices. No atomics: dw is
//        bit-reproducible run to run.
// Lane l of a row's warp takes the row's 8-element (f16/bf16) or 4-element (f32) groups l, l + 32,
// … and sums their elements in order. Rows of whole 16-byte packs with 16-byte aligned tensors
// load each group as one pack (kVec); other rows load the same groups element by element. Both
// add the same terms in the same order, so the results do not depend on alignment: the fused op
// and a misaligned view give the bits of the aligned, unfused op.
// Every product and sum is its own rounding (__f*_rn), so no instantiation contracts differently.
// Two policies make the kernels serve both ops without touching their arithmetic:
//   Src  (forward) where a row's group at element i (n valid elements) comes from, in f32:
//        first<kVec>(i, n, v) on the first pass over a row, again<kVec>(i, n, v) on the second
//        (the same values); RmsRowsOfX reads x.
//   Sink (backward) what happens to dx's group at element i, handed over in f32 before any
//        rounding: put<kVec>(i, n, v); RmsDxStore rounds it into dx.
// A lane touches the same elements of its row on both passes, so a Src may re-read what its
// first pass wrote.
#pragma once
#include <algorithm>

#include "ops/cuda/common.cuh"

namespace st::ops::cuda::rms_rows {

using st::cuda::load_pack;
using st::cuda::Pack;
using st::cuda::store_pack;

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels

// a group: n ≤ Pack<T>::N elements from p in f32 (kVec: one 16-byte pack, n = N); lanes past n
// hold 0 and are never used
template <class T, bool kVec>
__device__ inline void load_group(const T* p, int n, float (&v)[Pack<T>::N]) {
  if constexpr (kVec) {
    const Pack<T> q = load_pack(p);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) v[j] = to_float(q.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) v[j] = j < n ? to_float(p[j]) : 0.f;
  }
}

template <class T, bool kVec>
__device__ inline void store_group(T* p, int n, const float (&v)[Pack<T>::N]) {
  if constexpr (kVec) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) o.v[j] = from_float<T>(v[j]);
    store_pack(p, o);
  } else {
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j)
      if (j < n) p[j] = from_float<T>(v[j]);
  }
}

// elements of group p of a row of C: NP, fewer in the last group of a row that is not whole packs
template <int NP>
__device__ inline int group_size(int64_t C, int64_t p) {
  const int64_t left = C - p * NP;
  return left < NP ? static_cast<int>(left) : NP;
}

// policies of ops::rmsnorm

template <class T>
struct RmsRowsOfX {
  const T* x;  // (N, C)
  template <bool kVec>
  __device__ void first(int64_t i, int n, float (&v)[Pack<T>::N]) const { load_group<T, kVec>(x + i, n, v); }
  template <bool kVec>
  __device__ void again(int64_t i, int n, float (&v)[Pack<T>::N]) const { load_group<T, kVec>(x + i, n, v); }
};

template <class T>
struct RmsDxStore {
  T* dx;  // (N, C)
  template <bool kVec>
  __device__ void put(int64_t i, int n, const float (&v)[Pack<T>::N]) const { store_group<T, kVec>(dx + i, n, v); }
};

// kernels

// rows of src (N, C) → y (N, C); w (C); rstd (N)
template <class T, bool kVec, class Src>
__global__ void rmsnorm_fwd_kernel(Src src, const T* w, float eps, T* y, float* rstd, int64_t N, int64_t C) {
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t row = r * C, G = (C + NP - 1) / NP;
  float ss = 0.f;
  for (int64_t p = lane; p < G; p += 32) {
    const int n = group_size<NP>(C, p);
    float v[NP];
    src.template first<kVec>(row + p * NP, n, v);
#pragma unroll
    for (int j = 0; j < NP; ++j)
      if (kVec || j < n) ss = __fadd_rn(ss, __fmul_rn(v[j], v[j]));
  }
  const float rs = rsqrtf(__fadd_rn(__fdiv_rn(warp_sum(ss), static_cast<float>(C)), eps));
  for (int64_t p = lane; p < G; p += 32) {
    const int n = group_size<NP>(C, p);
    float v[NP], wv[NP], o[NP];
    src.template again<kVec>(row + p * NP, n, v);
    load_group<T, kVec>(w + p * NP, n, wv);
#pragma unroll
    for (int j = 0; j < NP; ++j) o[j] = __fmul_rn(wv[j], to_float(from_float<T>(__fmul_rn(v[j], rs))));
    store_group<T, kVec>(y + row + p * NP, n, o);
  }
  if (lane == 0) rstd[r] = rs;
}

// x, dy (N, C) → dx (N, C) through the sink; w (C); rstd (N)
template <class T, bool kVec, class Sink>
__global__ void rmsnorm_bwd_dx_kernel(const T* x, const T* w, const float* rstd, const T* dy, Sink sink, int64_t N,
                                      int64_t C) {
  constexpr int NP = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= N) return;
  const int64_t row = r * C, G = (C + NP - 1) / NP;
  const float rs = rstd[r];
  float dot = 0.f;  // Σ g·n̂
  for (int64_t p = lane; p < G; p += 32) {
    const int n = group_size<NP>(C, p);
    float xv[NP], gv[NP], wv[NP];
    load_group<T, kVec>(x + row + p * NP, n, xv);
    load_group<T, kVec>(dy + row + p * NP, n, gv);
    load_group<T, kVec>(w + p * NP, n, wv);
#pragma unroll
    for (int j = 0; j < NP; ++j)
      if (kVec || j < n) dot = __fadd_rn(dot, __fmul_rn(__fmul_rn(gv[j], wv[j]), __fmul_rn(xv[j], rs)));
  }
  const float m = __fdiv_rn(warp_sum(dot), static_cast<float>(C));
  for (int64_t p = lane; p < G; p += 32) {
    const int n = group_size<NP>(C, p);
    float xv[NP], gv[NP], wv[NP], o[NP];
    load_group<T, kVec>(x + row + p * NP, n, xv);
    load_group<T, kVec>(dy + row + p * NP, n, gv);
    load_group<T, kVec>(w + p * NP, n, wv);
#pragma unroll
    for (int j = 0; j < NP; ++j)  // rstd·(g − n̂·m)
      o[j] = __fmul_rn(rs, __fsub_rn(__fmul_rn(gv[j], wv[j]), __fmul_rn(__fmul_rn(xv[j], rs), m)));
    sink.template put<kVec>(row + p * NP, n, o);
  }
}

// dw partials: block (32 columns, 8 row lanes) of column tile blockIdx.x and row slice blockIdx.y;
// lane y sums rows y, y + 8, … of the slice in order, then lane 0 adds the 8 lane sums in order.
// x, dy (N, C); rstd (N); part (S, C) f32
template <class T>
__global__ void rmsnorm_bwd_dw_partial_kernel(const T* x, const float* rstd, const T* dy, float* part, int64_t N,
                                              int64_t C, int64_t rows_per_slice) {
  __shared__ float s[8][32];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_slice, r1 = min(N, r0 + rows_per_slice);
  float acc = 0.f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float nh = to_float(from_float<T>(__fmul_rn(to_float(x[r * C + c]), rstd[r])));  // the forward's n
      acc = __fadd_rn(acc, __fmul_rn(to_float(dy[r * C + c]), nh));
    }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float t = s[0][threadIdx.x];
  for (int k = 1; k < 8; ++k) t = __fadd_rn(t, s[k][threadIdx.x]);
  part[blockIdx.y * C + c] = t;
}

// part (S, C) → dw (C) in a fixed order: lane y of a (32 columns × 8 lanes) block sums partials
// s ≡ y (mod 8) in order, then lane 0 adds the 8 lane sums in lane order
template <class T>
__global__ void rmsnorm_bwd_dw_final_kernel(const float* part, int64_t S, int64_t C, T* dw) {
  __shared__ float s[8][32];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  float t = 0.f;
  if (c < C)
    for (int64_t k = threadIdx.y; k < S; k += 8) t = __fadd_rn(t, part[k * C + c]);
  s[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int l = 1; l < 8; ++l) t = __fadd_rn(t, s[l][threadIdx.x]);
  dw[c] = from_float<T>(t);
}

// launchers

// Whether rows of C elements can take the packed loads: C whole packs and every (defined) tensor
// 16-byte aligned. (Either way the results are the same.)
template <class T>
bool vec_ok(int64_t C, std::initializer_list<const Tensor*> ts) {
  if (C % Pack<T>::N != 0) return false;
  for (const Tensor* t : ts)
    if (t->defined() && !st::cuda::aligned16(t->data_ptr())) return false;
  return true;
}

// rows of src (N, C) → y (N, C), rstd (N); vec: the rows (src's tensors), w, y pass vec_ok
template <class T, class Src>
void rmsnorm_fwd_rows(const Src& src, const T* w, float eps, T* y, float* rstd, int64_t N, int64_t C, bool vec,
                      cudaStream_t stream) {
  if (N == 0) return;
  auto kernel = vec ? rmsnorm_fwd_kernel<T, true, Src> : rmsnorm_fwd_kernel<T, false, Src>;
  kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, stream>>>(src, w, eps, y, rstd, N, C);
  CHECK_LAUNCH();
}

// x, dy (N, C) → dx (N, C) through the sink, dw (C) written (=); vec: x, dy, w and the sink's
// tensors pass vec_ok. Launches: 3 (dx, dw partials, their sum); 2 when N = 0 (dw = 0).
template <class T, class Sink>
void rmsnorm_bwd_rows(const T* x, const T* w, const float* rstd, const T* dy, const Sink& sink, T* dw, int64_t N,
                      int64_t C, bool vec, cudaStream_t stream) {
  if (C == 0) return;
  if (N > 0) {
    auto kernel = vec ? rmsnorm_bwd_dx_kernel<T, true, Sink> : rmsnorm_bwd_dx_kernel<T, false, Sink>;
    kernel<<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, stream>>>(x, w, rstd, dy, sink, N, C);
    CHECK_LAUNCH();
  }
  // slices: ~4 blocks per SM (132 on an H100 / H200) over the column tiles, ≥ 32 rows each
  const int64_t tiles = (C + 31) / 32;
  int64_t S = std::max<int64_t>(1, std::min<int64_t>((4 * 132 + tiles - 1) / tiles, (N + 31) / 32));
  S = std::min<int64_t>(S, 65535);
  const int64_t rows_per_slice = N > 0 ? (N + S - 1) / S : 1;
  Tensor part_t = Tensor::empty({S, C}, DType::f32, Device::cuda);  // (S, C)
  float* part = part_t.data<float>();
  rmsnorm_bwd_dw_partial_kernel<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(S)), dim3(32, 8), 0,
                                     stream>>>(x, rstd, dy, part, N, C, rows_per_slice);
  CHECK_LAUNCH();
  rmsnorm_bwd_dw_final_kernel<T><<<static_cast<unsigned>(tiles), dim3(32, 8), 0, stream>>>(part, S, C, dw);
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda::rms_rows
