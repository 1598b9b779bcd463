// CPU GEMM: f32 compute through sgemm (fixed blocking, ops/cpu/sgemm.h), one matrix per batch entry.
#include "ops/cpu/common.h"
#include "ops/cpu/sgemm.h"
#include "ops/matmul.h"

namespace st::ops::cpu {

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
          int64_t K, bool b_shared) {
  Tensor a32 = as_f32(a), b32 = as_f32(b);
  Tensor c32 = c.dtype() == DType::f32 ? c : Tensor::empty(c.shape(), DType::f32);
  const float* pa = a32.data<float>();
  const float* pb = b32.data<float>();
  float* pc = c32.data<float>();
  for (int64_t i = 0; i < batch; ++i)
    sgemm(pa + i * M * K, ta, pb + (b_shared ? 0 : i * K * N), tb, pc + i * M * N, M, N, K);
  if (!c32.same(c)) c.copy_(c32);
}

}  // namespace st::ops::cpu
