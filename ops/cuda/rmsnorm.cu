// CUDA RMS normalisation over the last dim: the row kernels of ops/cuda/rmsnorm_rows.cuh reading
// x and writing dx as they are (the fused residual add + RMS norm, ops/cuda/add_rmsnorm.cu, runs
// the same kernels with another row source and dx sink).
//   fwd: one launch (a warp per row)
//   bwd: three launches (dx; dw partials over row slices; their fixed-order sum)
#include "ops/cuda/rmsnorm_rows.cuh"
#include "ops/rmsnorm.h"

namespace st::ops::cuda {

// launchers

void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  check_contiguous_cuda("rmsnorm", {&x, &w, &y, &rstd});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    rms_rows::rmsnorm_fwd_rows<T>(rms_rows::RmsRowsOfX<T>{static_cast<const T*>(x.data_ptr())},
                                  static_cast<const T*>(w.data_ptr()), eps, static_cast<T*>(y.data_ptr()),
                                  rstd.data<float>(), N, C, rms_rows::vec_ok<T>(C, {&x, &w, &y}), current_stream());
  });
}

void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw) {
  check_contiguous_cuda("rmsnorm", {&x, &w, &rstd, &dy, &dx, &dw});
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  visit_float_dtype(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    rms_rows::rmsnorm_bwd_rows<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
                                  rstd.data<float>(), static_cast<const T*>(dy.data_ptr()),
                                  rms_rows::RmsDxStore<T>{static_cast<T*>(dx.data_ptr())},
                                  static_cast<T*>(dw.data_ptr()), N, C, rms_rows::vec_ok<T>(C, {&x, &w, &dy, &dx}),
                                  current_stream());
  });
}

}  // namespace st::ops::cuda
