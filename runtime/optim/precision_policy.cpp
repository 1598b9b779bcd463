// The precision policy (see the header).
#include "runtime/optim/precision_policy.h"

namespace st::runtime {
namespace {

DType dtype_of(Precision p) {
  switch (p) {
    case Precision::fp16: return DType::f16;
    case Precision::bf16:
    case Precision::fp8: return DType::bf16;
    case Precision::fp32: break;
  }
  return DType::f32;
}

}  // namespace

PrecisionPolicy precision_policy(Precision precision, Precision grad_comm, ops::Fp8ScaleMode fp8_scaling,
                                 int64_t fp8_amax_history) {
  PrecisionPolicy p;
  p.precision = precision;
  p.compute = dtype_of(precision);
  p.grad_comm = dtype_of(grad_comm);
  p.loss_scaling = precision == Precision::fp16;
  if (precision == Precision::fp8) p.fp8 = fp8_training_recipe(fp8_scaling, fp8_amax_history);
  return p;
}

}  // namespace st::runtime
