// Helpers shared by the CPU kernels. CPU kernels compute in f32: f16/bf16 operands are widened
// once on entry and results rounded once on store (round-to-nearest-even), which is what lets
// mixed precision run in CI without a GPU. exp, log and tanh come from ops/cpu_math/elementary.h and
// matrix products from ops/cpu/sgemm.h, never from libm or Eigen's own products, so that results
// do not depend on the CPU (docs/testing.md "CPU numerics").
#pragma once
#include "tensor/tensor.h"

namespace st::ops::cpu {

// A contiguous f32 tensor holding x's values (x itself when it already is one).
Tensor as_f32(const Tensor& x);

// v as a tensor of dtype dt holds it: rounded to nearest even, widened back (v itself for f32).
float round_to(DType dt, float v);

// Runs `fn(out32)` on an f32 buffer shaped like `shape` and returns it as `dtype` (rounded once).
template <class Fn>
Tensor compute_f32(const Shape& shape, DType dtype, Fn&& fn) {
  Tensor out32 = Tensor::empty(shape, DType::f32, Device::cpu);
  fn(out32);
  return dtype == DType::f32 ? out32 : out32.to(dtype);
}

}  // namespace st::ops::cpu
