// CUDA merge_attention (ops/attention_merge.h): one thread per query row (its weights formed once in
// double, as the CPU does, then the row's D values in f32), a grid-stride loop over the rows.
#include <cmath>

#include "ops/attention_merge.h"
#include "ops/cuda/common.cuh"

namespace st::ops::cuda {
namespace {

__global__ void merge_kernel(float* out, float* lse, const float* out_b, const float* lse_b, int64_t rows, int64_t D) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    float* o = out + r * D;
    const float* ob = out_b + r * D;
    const float la = lse[r], lb = lse_b[r];
    if (lb == -INFINITY) continue;  // b saw no key
    if (la == -INFINITY) {          // a saw no key: take b
      for (int64_t c = 0; c < D; ++c) o[c] = ob[c];
      lse[r] = lb;
      continue;
    }
    const double diff = fabs(double(la) - double(lb));
    if (isnan(diff)) {
      for (int64_t c = 0; c < D; ++c) o[c] = NAN;
      lse[r] = NAN;
      continue;
    }
    const double e = diff > 700.0 ? 0.0 : exp(-diff), w_max = 1.0 / (1.0 + e), w_min = e * w_max;
    const bool a_max = la >= lb;
    const float wa = float(a_max ? w_max : w_min), wb = float(a_max ? w_min : w_max);
    for (int64_t c = 0; c < D; ++c) o[c] = wa * o[c] + wb * ob[c];
    lse[r] = float((a_max ? la : lb) + log1p(e));
  }
}

}  // namespace

void merge_attention(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) {
  Tensor ob = out_b.to(DType::f32).contiguous(), lb = lse_b.contiguous();  // (B, H, T, D), (B, H, T)
  const int64_t rows = lse.numel(), D = out.size(3);
  if (rows == 0) return;
  merge_kernel<<<grid_for(rows, 256), 256, 0, current_stream()>>>(out.data<float>(), lse.data<float>(),
                                                                  ob.data<float>(), lb.data<float>(), rows, D);
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda
