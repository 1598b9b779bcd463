// CUDA residual add + layernorm: layernorm's row kernels (ops/cuda/layernorm_rows.cuh) with
//   a row source that forms r = x + dropout(a) on the first pass over a row (writing r, which
//     the backward needs, and which later passes of the same lane read back), and
//   a dx sink that adds the residual's gradient and applies the dropout mask as dx is written.
// Launches: fwd 1 (the unfused add, dropout and layernorm: 1–3); bwd 2 for rows of whole 16-byte
// packs with C ≤ 1024, else 3 (the unfused: layernorm's 2–3, the engine's sum of r's two
// gradients 2 (a copy and an add), dropout 1). Each element's arithmetic is the unfused ops':
//   dropout  philox_uniform_lane(seed, offset + i) < p ? 0 : a·(1/(1 − p)), rounded to T (DropoutF)
//   add      x + that in f32, rounded to T (the add kernel)
//   dx       layernorm's dx rounded to T, + dr in f32, rounded to T (the engine's add_)
// with __fmul_rn / __fadd_rn where a plain expression could be contracted into an FMA (in f32
// the rounding to T is no operation, so nvcc could fuse across it).
#include "ops/add_layernorm.h"
#include "ops/cuda/layernorm_rows.cuh"
#include "ops/cuda/pointwise.cuh"
#include "tensor/philox.h"

namespace st::ops::cuda {
namespace {

using ln_rows::load_pack;
using ln_rows::Pack;
using ln_rows::store_pack;

// The dropout of a (p > 0): element i's value after it, in f32 before rounding (DropoutF's).
struct ResidualMask {
  static constexpr bool kActive = true;
  const uint64_t* seed_at;  // device pointer, or null: `seed`
  uint64_t seed, offset;
  float p, scale;
  __device__ float operator()(int64_t i, float v) const {
    const uint64_t s = seed_at ? *seed_at : seed;
    return philox_uniform_lane(s, offset + static_cast<uint64_t>(i)) < p ? 0.f : __fmul_rn(v, scale);
  }
};
struct NoMask {
  static constexpr bool kActive = false;
  __device__ float operator()(int64_t, float v) const { return v; }
};

template <class T, class Mask>
__device__ inline T residual(T x, T a, int64_t i, const Mask& mask) {
  return from_float<T>(__fadd_rn(to_float(x), to_float(from_float<T>(mask(i, to_float(a))))));
}

// forward row source: r = x + mask(a), written on the first pass, read back (plain loads, not
// the read-only path: this kernel wrote them) on later ones
template <class T, class Mask>
struct RowsOfResidual {
  static constexpr int kMinBlocks = 1;  // no cap: at ptxas's own choice (0) its K = 4 kernels spill
  const T *x, *a;
  T* r;
  Mask mask;
  __device__ float first(int64_t i) const {
    const T v = residual(x[i], a[i], i, mask);
    r[i] = v;
    return to_float(v);
  }
  __device__ float again(int64_t i) const { return to_float(r[i]); }
  __device__ Pack<T> first_pack(int64_t i) const {
    Pack<T> xv = load_pack(x + i), av = load_pack(a + i), o;
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) o.v[j] = residual(xv.v[j], av.v[j], i + j, mask);
    store_pack(r + i, o);
    return o;
  }
  __device__ Pack<T> again_pack(int64_t i) const {
    Pack<T> o;
    *reinterpret_cast<int4*>(&o) = *reinterpret_cast<const int4*>(r + i);
    return o;
  }
};

// backward dx sink: dx = dLN (rounded) + dr (when given), da = mask(dx) (with a mask only)
template <class T, class Mask>
struct ResidualGrad {
  // layernorm's fused kernel fits 2 blocks per SM (≤ 128 registers) up to 24 columns per lane
  // (C ≤ 768), as its slices assume: kept where this sink fits too without spilling (without a
  // mask; with one, whose Philox rounds need registers, up to 16 columns), else 1 (ptxas -v)
  template <int K>
  static constexpr int min_blocks() { return K * Pack<T>::N <= (Mask::kActive ? 16 : 24) ? 2 : 1; }
  const T* dr;  // or null
  T *dx, *da;   // da: used with a mask only
  Mask mask;
  __device__ T grad(float v, T g_r) const {
    const T d = from_float<T>(v);
    return dr ? from_float<T>(__fadd_rn(to_float(g_r), to_float(d))) : d;
  }
  __device__ void put(int64_t i, float v) const {
    const T g = grad(v, dr ? dr[i] : T{});
    dx[i] = g;
    if constexpr (Mask::kActive) da[i] = from_float<T>(mask(i, to_float(g)));
  }
  __device__ void put_pack(int64_t i, const float (&v)[Pack<T>::N]) const {
    Pack<T> rv, o;
    if (dr) rv = load_pack(dr + i);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) o.v[j] = grad(v[j], dr ? rv.v[j] : T{});
    store_pack(dx + i, o);
    if constexpr (Mask::kActive) {
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) o.v[j] = from_float<T>(mask(i + j, to_float(o.v[j])));
      store_pack(da + i, o);
    }
  }
};

ResidualMask mask_of(const ResidualDropout& d) {
  return {d.seed_at.defined() ? static_cast<const uint64_t*>(d.seed_at.data_ptr()) : nullptr, d.seed, d.offset, d.p,
          d.p < 1.f ? 1.f / (1.f - d.p) : 0.f};
}

// A 16-byte aligned copy of t when it is not (bits unchanged). The fused kernels take layernorm's
// vectorised row kernels only when every tensor they touch is aligned, while the unfused layernorm
// sees x + a (a fresh, aligned tensor) and dy alone: x, a (forward) and dr (backward) made aligned
// keep the fused op on the kernel the unfused layernorm takes, so its reductions are the same.
// (The H200 run of 94a899e: a misaligned x and a, bit-identical otherwise, differed by an ulp.)
Tensor aligned(const Tensor& t) { return !t.defined() || st::cuda::aligned16(t.data_ptr()) ? t : t.clone(); }

template <class T, class Mask>
void fwd(const Tensor& x_in, const Tensor& a_in, const Mask& mask, const Tensor& w, const Tensor& b, float eps,
         Tensor& r, Tensor& y, Tensor& mean, Tensor& rstd, int64_t N, int64_t C) {
  const Tensor x = aligned(x_in), a = aligned(a_in);
  RowsOfResidual<T, Mask> src{static_cast<const T*>(x.data_ptr()), static_cast<const T*>(a.data_ptr()),
                              static_cast<T*>(r.data_ptr()), mask};
  ln_rows::layernorm_fwd_rows<T>(src, static_cast<const T*>(w.data_ptr()), static_cast<const T*>(b.data_ptr()), eps,
                                 static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>(), N, C,
                                 ln_rows::vec_ok<T>(C, {&x, &a, &r, &w, &b, &y}), current_stream());
}

template <class T, class Mask>
void bwd(const Tensor& r, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
         const Tensor& dr_in, const Mask& mask, Tensor& dx, Tensor& da, Tensor& dw, Tensor& db, int64_t N, int64_t C) {
  const Tensor dr = aligned(dr_in);
  ResidualGrad<T, Mask> sink{dr.defined() ? static_cast<const T*>(dr.data_ptr()) : nullptr,
                             static_cast<T*>(dx.data_ptr()), da.defined() ? static_cast<T*>(da.data_ptr()) : nullptr,
                             mask};
  ln_rows::layernorm_bwd_rows<T>(static_cast<const T*>(r.data_ptr()), static_cast<const T*>(w.data_ptr()),
                                 mean.data<float>(), rstd.data<float>(), static_cast<const T*>(dy.data_ptr()), sink,
                                 static_cast<T*>(dw.data_ptr()), static_cast<T*>(db.data_ptr()), N, C,
                                 ln_rows::vec_ok<T>(C, {&r, &w, &dy, &dr, &dx, &da}), current_stream());
}

// dy undefined: da = mask(dr), one elementwise pass (map1)
struct MaskF {
  ResidualMask mask;
  __device__ float operator()(int64_t i, float v) const { return mask(i, v); }
};

}  // namespace

// launchers

void add_layernorm_fwd(const Tensor& x, const Tensor& a, const ResidualDropout& d, const Tensor& w, const Tensor& b,
                       float eps, Tensor& r, Tensor& y, Tensor& mean, Tensor& rstd) {
  check_contiguous_cuda("add_layernorm", {&x, &a, &w, &b, &r, &y, &mean, &rstd, &d.seed_at});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "add_layernorm", [&](auto tag) {
    using T = decltype(tag);
    if (d.p > 0.f)
      fwd<T>(x, a, mask_of(d), w, b, eps, r, y, mean, rstd, N, C);
    else
      fwd<T>(x, a, NoMask{}, w, b, eps, r, y, mean, rstd, N, C);
  });
}

void add_layernorm_bwd(const Tensor& r, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                       const Tensor& dr, const ResidualDropout& d, Tensor& dx, Tensor& da, Tensor& dw, Tensor& db) {
  check_contiguous_cuda("add_layernorm", {&r, &w, &mean, &rstd, &dy, &dr, &dx, &da, &dw, &db, &d.seed_at});
  const int64_t C = r.size(-1), N = C ? r.numel() / C : 0;
  visit_float_dtype(r.dtype(), "add_layernorm", [&](auto tag) {
    using T = decltype(tag);
    if (!dy.defined()) {  // only the residual's gradient: dx = dr, da = mask(dr)
      dx.copy_(dr);
      if (da.defined()) map1<T>(dr, da, MaskF{mask_of(d)});
      return;
    }
    if (da.defined())
      bwd<T>(r, w, mean, rstd, dy, dr, mask_of(d), dx, da, dw, db, N, C);
    else
      bwd<T>(r, w, mean, rstd, dy, dr, NoMask{}, dx, da, dw, db, N, C);
  });
}

}  // namespace st::ops::cuda
