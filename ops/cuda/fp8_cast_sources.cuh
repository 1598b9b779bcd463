// Where the packed transposing FP8 cast (ops/cuda/fp8_cast.cu's cast_transpose_kernel) reads its
// x (R, C) from: src(r, c) is the pack of x[r, c … c+N) (st::cuda::Pack<T>, 16 bytes). Every
// source rounds each value to T as the op that would otherwise write x rounds it, so the cast's
// bits are that op's output cast (tests/gpu/test_gpu_fp8_mlp.cpp).
#pragma once
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/silu.cuh"

namespace st::ops::cuda::fp8_sources {

using st::cuda::load_pack;
using st::cuda::Pack;

//   PlainSrc     x itself (row-major, leading dim C)
//   GeluSrc      x = gelu(pre), each value rounded to T as ops::gelu's kernel rounds it (gelu.cuh)
//   GeluGradSrc  x = dh · gelu'(pre), rounded to T as ops::gelu's backward rounds it
//   SwigluSrc, SwigluGradSrc  (below) ops::swiglu's output and input gradient
// All but the first are the fused MLP's casts (ops/fp8_mlp.h): x is never written to memory.
template <class T>
struct PlainSrc {
  const T* x;
  int64_t C;
  __device__ Pack<T> operator()(int64_t r, int64_t c) const { return load_pack(x + r * C + c); }
};
template <class T>
struct GeluSrc {
  const T* pre;
  int64_t C;
  __device__ Pack<T> operator()(int64_t r, int64_t c) const {
    Pack<T> p = load_pack(pre + r * C + c);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) p.v[j] = from_float<T>(gelu_tanh(to_float(p.v[j])));
    return p;
  }
};
template <class T>
struct GeluGradSrc {
  const T* pre;
  const T* dh;
  int64_t C;
  __device__ Pack<T> operator()(int64_t r, int64_t c) const {
    Pack<T> p = load_pack(pre + r * C + c);
    const Pack<T> g = load_pack(dh + r * C + c);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) p.v[j] = from_float<T>(gelu_tanh_grad(to_float(p.v[j]), to_float(g.v[j])));
    return p;
  }
};

// [gate | up] rows of width 2F: SwiGLU's output x (R, F) and its input gradient x (R, 2F) for dy
// (R, F), each value rounded as ops::swiglu's kernels round it (swiglu.cu: silu rounded to T, the
// products each rounded). A source of one pack is called src(r, c); one with kHalves = 2 writes
// the packs of both halves of a row, src(r, f, o) — the cast's tiles then span F columns.
template <class T>
struct SwigluSrc {
  const T* gu;
  int64_t F;
  __device__ Pack<T> operator()(int64_t r, int64_t c) const {
    const Pack<T> g = load_pack(gu + r * 2 * F + c), u = load_pack(gu + r * 2 * F + F + c);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j)
      o.v[j] = from_float<T>(__fmul_rn(to_float(from_float<T>(silu_f32(to_float(g.v[j])))), to_float(u.v[j])));
    return o;
  }
};
// the input gradient's two halves from one read of gate, up and dy: src(r, f, o) sets o[0] = d(gate)
// and o[1] = d(up) at columns f … f+N of each half (kHalves: the cast writes them at f and F + f)
template <class T>
struct SwigluGradSrc {
  static constexpr int kHalves = 2;
  const T* gu;
  const T* dy;
  int64_t F;
  __device__ void operator()(int64_t r, int64_t f, Pack<T> (&o)[2]) const {  // F % N = 0
    const Pack<T> g = load_pack(gu + r * 2 * F + f), u = load_pack(gu + r * 2 * F + F + f);
    const Pack<T> d = load_pack(dy + r * F + f);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) {
      const float gj = to_float(g.v[j]), dj = to_float(d.v[j]);
      o[0].v[j] = from_float<T>(silu_grad_f32(gj, to_float(from_float<T>(__fmul_rn(dj, to_float(u.v[j]))))));
      o[1].v[j] = from_float<T>(__fmul_rn(dj, to_float(from_float<T>(silu_f32(gj)))));
    }
  }
};

// the halves of a source: 1, or its kHalves
template <class S, class = void>
struct src_halves : std::integral_constant<int, 1> {};
template <class S>
struct src_halves<S, std::void_t<decltype(S::kHalves)>> : std::integral_constant<int, S::kHalves> {};

// the packs of row r at column c of each half of src
template <class Src, class T, int H>
__device__ inline void load_src(const Src& src, int64_t r, int64_t c, Pack<T> (&p)[H]) {
  if constexpr (H == 1)
    p[0] = src(r, c);
  else
    src(r, c, p);
}

}  // namespace st::ops::cuda::fp8_sources
