#include "ops/cpu/common.h"

#include "tensor/autograd.h"

namespace st::ops::cpu {

Tensor as_f32(const Tensor& x) {
  NoGradGuard ng;  // kernels never build graphs
  if (x.dtype() == DType::f32 && x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), DType::f32, Device::cpu);
  out.copy_(x);
  return out;
}

}  // namespace st::ops::cpu
