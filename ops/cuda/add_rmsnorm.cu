// CUDA residual add + RMS normalisation: rmsnorm's row kernels (ops/cuda/rmsnorm_rows.cuh) with
//   a row source that forms r = x + a on the first pass over a row (writing r, which the backward
//     needs, and which the second pass of the same lane reads back), and
//   a dx sink that adds the residual's gradient as dx is written.
// Launches: fwd 1 (the unfused add and rmsnorm: 2); bwd 3 (the unfused: rmsnorm's 3 and the
// engine's sum of r's two gradients, a copy and an add). Each element's arithmetic is the
// unfused ops': r = x + a in f32 rounded to T (the add kernel); dx = rmsnorm's dx rounded to T,
// + dr in f32, rounded to T (the engine's add_). The row kernels give the same bits whether or not
// the tensors are aligned, so no aligned copies are needed to match the unfused op.
#include "ops/add_rmsnorm.h"
#include "ops/cuda/rmsnorm_rows.cuh"

namespace st::ops::cuda {
namespace {

using rms_rows::load_group;
using rms_rows::Pack;
using rms_rows::store_group;

// forward row source: r = x + a, written on the first pass, read back (plain loads, not the
// read-only path: this kernel wrote them) on the second
template <class T>
struct RowsOfResidual {
  const T *x, *a;  // (N, C)
  T* r;            // (N, C)
  template <bool kVec>
  __device__ void first(int64_t i, int n, float (&v)[Pack<T>::N]) const {
    float av[Pack<T>::N];
    load_group<T, kVec>(x + i, n, v);
    load_group<T, kVec>(a + i, n, av);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) v[j] = to_float(from_float<T>(__fadd_rn(v[j], av[j])));  // r in T
    store_group<T, kVec>(r + i, n, v);
  }
  template <bool kVec>
  __device__ void again(int64_t i, int n, float (&v)[Pack<T>::N]) const {
    if constexpr (kVec) {
      Pack<T> q;
      *reinterpret_cast<int4*>(&q) = *reinterpret_cast<const int4*>(r + i);
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) v[j] = to_float(q.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) v[j] = j < n ? to_float(r[i + j]) : 0.f;
    }
  }
};

// backward dx sink: dx = round(dRMS) + dr (when given), rounded
template <class T>
struct ResidualGrad {
  const T* dr;  // (N, C), or null
  T* dx;        // (N, C)
  template <bool kVec>
  __device__ void put(int64_t i, int n, const float (&v)[Pack<T>::N]) const {
    float o[Pack<T>::N];
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) o[j] = to_float(from_float<T>(v[j]));
    if (dr) {
      float rv[Pack<T>::N];
      load_group<T, kVec>(dr + i, n, rv);
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) o[j] = __fadd_rn(rv[j], o[j]);
    }
    store_group<T, kVec>(dx + i, n, o);
  }
};

}  // namespace

// launchers

void add_rmsnorm_fwd(const Tensor& x, const Tensor& a, const Tensor& w, float eps, Tensor& r, Tensor& y, Tensor& rstd) {
  check_contiguous_cuda("add_rmsnorm", {&x, &a, &w, &r, &y, &rstd});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "add_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    RowsOfResidual<T> src{static_cast<const T*>(x.data_ptr()), static_cast<const T*>(a.data_ptr()),
                          static_cast<T*>(r.data_ptr())};
    rms_rows::rmsnorm_fwd_rows<T>(src, static_cast<const T*>(w.data_ptr()), eps, static_cast<T*>(y.data_ptr()),
                                  rstd.data<float>(), N, C, rms_rows::vec_ok<T>(C, {&x, &a, &r, &w, &y}),
                                  current_stream());
  });
}

void add_rmsnorm_bwd(const Tensor& r, const Tensor& w, const Tensor& rstd, const Tensor& dy, const Tensor& dr,
                     Tensor& dx, Tensor& dw) {
  check_contiguous_cuda("add_rmsnorm", {&r, &w, &rstd, &dy, &dr, &dx, &dw});
  if (!dy.defined()) {  // only the residual's gradient
    dx.copy_(dr);
    return;
  }
  const int64_t C = r.size(-1), N = C ? r.numel() / C : 0;
  visit_float_dtype(r.dtype(), "add_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    ResidualGrad<T> sink{dr.defined() ? static_cast<const T*>(dr.data_ptr()) : nullptr, static_cast<T*>(dx.data_ptr())};
    rms_rows::rmsnorm_bwd_rows<T>(static_cast<const T*>(r.data_ptr()), static_cast<const T*>(w.data_ptr()),
                                  rstd.data<float>(), static_cast<const T*>(dy.data_ptr()), sink,
                                  static_cast<T*>(dw.data_ptr()), N, C, rms_rows::vec_ok<T>(C, {&r, &w, &dy, &dr, &dx}),
                                  current_stream());
  });
}

}  // namespace st::ops::cuda
