// CUDA merge_attention (ops/attention_merge.h): a warp per query row — its weights formed once per
// lane in double, as the CPU does (every lane of the row forms the same ones), then the row's D
// values in f32 by the 32 lanes, consecutive lanes on consecutive elements (coalesced: the former
// thread-per-row loop read each row with a stride of D and ran ~10× off the memory roofline at
// the ring's 4 096-row chunks); out_b read in its own dtype (no f32 copy of it first). The row's
// lse is written by lane 0 after the warp has read it (__syncwarp), so no lane reads it changed.
#include <cmath>

#include "ops/attention_merge.h"
#include "ops/cuda/common.cuh"
#include "tensor/cuda/dtype_cuda.cuh"

namespace st::ops::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, a row each

template <class T>
__global__ void merge_kernel(float* out, float* lse, const T* out_b, const float* lse_b, int64_t rows, int64_t D) {
  const int lane = threadIdx.x;  // 0..31
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.y; r < rows; r += int64_t(gridDim.x) * kRowsPerBlock) {
    float* o = out + r * D;
    const T* ob = out_b + r * D;
    const float la = lse[r], lb = lse_b[r];
    if (lb == -INFINITY) continue;  // b saw no key
    float wa = 0.f, wb = 1.f, l = lb;  // a saw no key: take b
    if (la != -INFINITY) {
      const double diff = fabs(double(la) - double(lb));
      if (isnan(diff)) {
        wa = wb = l = NAN;
      } else {
        const double e = diff > 700.0 ? 0.0 : exp(-diff), w_max = 1.0 / (1.0 + e), w_min = e * w_max;
        const bool a_max = la >= lb;
        wa = float(a_max ? w_max : w_min);
        wb = float(a_max ? w_min : w_max);
        l = float((a_max ? la : lb) + log1p(e));
      }
    }
    for (int64_t c = lane; c < D; c += 32) {
      const float b = to_float(ob[c]);
      o[c] = la == -INFINITY ? b : isnan(wa) ? NAN : wa * o[c] + wb * b;
    }
    __syncwarp();
    if (lane == 0) lse[r] = l;
  }
}

}  // namespace

void merge_attention(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) {
  Tensor ob = out_b.contiguous(), lb = lse_b.contiguous();  // (B, H, T, D) in its dtype, (B, H, T) f32
  const int64_t rows = lse.numel(), D = out.size(3);
  if (rows == 0) return;
  const dim3 block(32, kRowsPerBlock);
  const unsigned blocks = grid_for(rows, kRowsPerBlock);
  visit_float_dtype(ob.dtype(), "merge_attention", [&](auto tag) {
    using T = decltype(tag);
    merge_kernel<T><<<blocks, block, 0, current_stream()>>>(out.data<float>(), lse.data<float>(),
                                                           static_cast<const T*>(ob.data_ptr()), lb.data<float>(),
                                                           rows, D);
  });
  CHECK_LAUNCH();
}

}  // namespace st::ops::cuda
