#include "ops/cuda_stub/no_cuda.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "ops/fp8_scaling.h"

namespace st::ops::cuda {
void fp8_scaling_update(float*, const Fp8ScalingOptions&) { no_cuda("fp8_scaling_update"); }
void fp8_scaling_update(const std::vector<std::pair<float*, const Fp8ScalingOptions*>>&) {
  no_cuda("fp8_scaling_update");
}
void fp8_amax(const Tensor&, float*) { no_cuda("fp8_amax"); }
void fp8_scale_current(float*, const Fp8ScalingOptions&) { no_cuda("fp8_quantize"); }
void fp8_cast(const Tensor&, Tensor&, Tensor&, float*, bool, float*, int64_t*, float*) { no_cuda("fp8_quantize"); }
void fp8_dequantize(const Tensor&, const float*, Tensor&) { no_cuda("fp8_dequantize"); }
bool fp8_cast_act(Fp8Act, const Tensor&, const Tensor&, Tensor&, Tensor&, float*, bool, float*, int64_t*, float*) {
  no_cuda("fp8_quantize_act");
}
void fp8_zero(float*) { no_cuda("fp8_quantize"); }
void fp8_gemm(const Tensor&, const float*, const Tensor&, const float*, Tensor&, const Tensor&, Fp8Accum) {
  no_cuda("fp8_matmul");
}
int64_t fp8_gemm_lt_launches() { return 0; }
}  // namespace st::ops::cuda
