// merge_attention (ops/attention_merge.h): checks, then one loop over the query rows in a fixed
// order; the weights in double from exp_f64 / log_f64 (ops/cpu_math/elementary.h), the output row
// in f32; CUDA tensors go to ops/cuda/attention_merge.cu.
#include "ops/attention_merge.h"

#include <cmath>
#include <limits>

#include "ops/check.h"
#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "tensor/autograd.h"

namespace st::ops {

void merge_attention(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) {
  const char* name = "merge_attention";
  check_defined(name, {out, lse, out_b, lse_b});
  check_same_device(name, {out, lse, out_b, lse_b});
  check_dtype(name, out, {DType::f32});
  check_dtype(name, lse, {DType::f32});
  check_dtype(name, lse_b, {DType::f32});
  check_floating(name, out_b);
  const bool ok = out.dim() == 4 && out_b.shape() == out.shape() &&
                  lse.shape() == Shape({out.size(0), out.size(1), out.size(2)}) && lse_b.shape() == lse.shape();
  if (!ok)
    ST_THROW(ShapeError, name << ": out " << shape_str(out.shape()) << ", lse " << shape_str(lse.shape()) << ", out_b "
                              << shape_str(out_b.shape()) << ", lse_b " << shape_str(lse_b.shape())
                              << " (expected out, out_b (B, H, T, D) and lse, lse_b (B, H, T))");
  ST_CHECK(out.is_contiguous() && lse.is_contiguous(), ValueError,
           name << ": out and lse are accumulators and must be contiguous");
  NoGradGuard ng;
  if (out.is_cuda()) return cuda::merge_attention(out, lse, out_b, lse_b);
  Tensor ob32 = cpu::as_f32(out_b), lb32 = cpu::as_f32(lse_b);
  float *o = out.data<float>(), *l = lse.data<float>();            // (rows, D), (rows)
  const float *ob = ob32.data<float>(), *lb = lb32.data<float>();  // (rows, D), (rows)
  const int64_t rows = lse.numel(), D = out.size(3);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * D;
    const float* brow = ob + r * D;
    const float la = l[r], lbr = lb[r];
    if (lbr == neg_inf) continue;  // b saw no key: (out, lse) stay (also when both are empty)
    if (la == neg_inf) {           // a saw no key: take b
      for (int64_t c = 0; c < D; ++c) orow[c] = brow[c];
      l[r] = lbr;
      continue;
    }
    const double diff = std::fabs(static_cast<double>(la) - lbr);
    if (std::isnan(diff)) {  // a NaN statistic (or +inf on both sides): the row is poisoned, keep it visible
      for (int64_t c = 0; c < D; ++c) orow[c] = std::numeric_limits<float>::quiet_NaN();
      l[r] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const double e = diff > 700.0 ? 0.0 : cpu::exp_f64(-diff);  // e^−|Δ| ∈ (0, 1]; below 1e-304 it is 0
    const double w_max = 1.0 / (1.0 + e), w_min = e * w_max;
    const bool a_max = la >= lbr;
    const float wa = static_cast<float>(a_max ? w_max : w_min), wb = static_cast<float>(a_max ? w_min : w_max);
    for (int64_t c = 0; c < D; ++c) orow[c] = wa * orow[c] + wb * brow[c];
    l[r] = static_cast<float>((a_max ? la : lbr) + cpu::log_f64(1.0 + e));
  }
}

void empty_attention(int64_t B, int64_t H, int64_t T, int64_t D, Tensor& out, Tensor& lse, Device device) {
  out = Tensor::zeros({B, H, T, D}, DType::f32, device);
  lse = Tensor::full({B, H, T}, -std::numeric_limits<double>::infinity(), DType::f32, device);
}

}  // namespace st::ops
