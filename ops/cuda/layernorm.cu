// CUDA layer normalisation over the last dim: the row kernels of ops/cuda/layernorm_rows.cuh
// reading x and writing dx as they are (the fused residual add + layernorm, ops/cuda/
// add_layernorm.cu, runs the same kernels with other row sources and dx sinks).
//   fwd: one launch (a warp per row; the row in registers when C ≤ 1024 and whole 16-byte packs)
//   bwd: two launches (fused dx + dw/db partials, then their fixed-order sum) for C ≤ 1024 and
//        whole packs, else three (dx, partials, sum)
#include "ops/cuda/layernorm_rows.cuh"
#include "ops/layernorm.h"

namespace st::ops::cuda {

// launchers

void layernorm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  check_contiguous_cuda("layernorm", {&x, &w, &b, &y, &mean, &rstd});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    ln_rows::layernorm_fwd_rows<T>(ln_rows::LnRowsOfX<T>{static_cast<const T*>(x.data_ptr())},
                                   static_cast<const T*>(w.data_ptr()), static_cast<const T*>(b.data_ptr()), eps,
                                   static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>(), N, C,
                                   ln_rows::vec_ok<T>(C, {&x, &w, &b, &y}), current_stream());
  });
}

void layernorm_bwd(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db) {
  check_contiguous_cuda("layernorm", {&x, &w, &mean, &rstd, &dy, &dx, &dw, &db});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    ln_rows::layernorm_bwd_rows<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
                                   mean.data<float>(), rstd.data<float>(), static_cast<const T*>(dy.data_ptr()),
                                   ln_rows::LnDxStore<T>{static_cast<T*>(dx.data_ptr())},
                                   static_cast<T*>(dw.data_ptr()), static_cast<T*>(db.data_ptr()), N, C,
                                   ln_rows::vec_ok<T>(C, {&x, &w, &dy, &dx}), current_stream());
  });
}

}  // namespace st::ops::cuda
