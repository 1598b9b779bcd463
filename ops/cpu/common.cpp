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

float round_to(DType dt, float v) {
  switch (dt) {
    case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(v));
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(v));
    default: return v;
  }
}

}  // namespace st::ops::cpu
