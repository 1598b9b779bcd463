// CPU GEMM through Eigen (row-major maps, lazy transposes), f32 compute.
#include <Eigen/Core>

#include "ops/cpu/common.h"
#include "ops/matmul.h"

namespace st::ops::cpu {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
          int64_t K, bool b_shared) {
  Tensor a32 = as_f32(a), b32 = as_f32(b);
  Tensor c32 = c.dtype() == DType::f32 ? c : Tensor::empty(c.shape(), DType::f32);
  const float* pa = a32.data<float>();
  const float* pb = b32.data<float>();
  float* pc = c32.data<float>();
  for (int64_t i = 0; i < batch; ++i) {
    ConstMap A(pa + i * M * K, ta ? K : M, ta ? M : K);
    ConstMap B(pb + (b_shared ? 0 : i * K * N), tb ? N : K, tb ? K : N);
    Map C(pc + i * M * N, M, N);
    if (!ta && !tb)
      C.noalias() = A * B;
    else if (ta && !tb)
      C.noalias() = A.transpose() * B;
    else if (!ta && tb)
      C.noalias() = A * B.transpose();
    else
      C.noalias() = A.transpose() * B.transpose();
  }
  if (!c32.same(c)) c.copy_(c32);
}

}  // namespace st::ops::cpu
