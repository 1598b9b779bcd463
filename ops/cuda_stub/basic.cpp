#include "ops/cuda_stub/no_cuda.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"

namespace st::ops::cuda {
void sum_fwd(const Tensor&, Tensor&) { no_cuda("sum"); }
void argmax_fwd(const Tensor&, Tensor&) { no_cuda("argmax"); }
void binary_fwd(BinaryOp, const Tensor&, const Tensor&, Tensor&) { no_cuda("elementwise"); }
void scale_fwd(const Tensor&, double, Tensor&) { no_cuda("scale"); }
void gemm(const Tensor&, const Tensor&, Tensor&, bool, bool, int64_t, int64_t, int64_t, int64_t, bool) {
  no_cuda("matmul");
}
void gemm_f32(const Tensor&, const Tensor&, Tensor&, bool, bool, int64_t, int64_t, int64_t, bool) { no_cuda("matmul"); }
bool gemm_lt(const Tensor&, const Tensor&, Tensor&, bool, bool, int64_t, int64_t, int64_t, LtEpilogue, const Tensor&,
             const Tensor&, const Tensor&) {
  return false;  // no fused epilogues without CUDA: callers take the unfused path
}
int64_t gemm_lt_launches(LtEpilogue) { return 0; }
void set_gemm_allow_tf32(bool) {}  // no TF32 without CUDA: the CPU's f32 GEMM is exact
bool gemm_allow_tf32() { return false; }
}  // namespace st::ops::cuda
