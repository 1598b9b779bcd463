// Elementwise arithmetic with NumPy broadcasting.
//   add / sub / mul / div: a (...), b (...) → broadcast shape; same dtype and device
//   scale(x, s) = s·x
// Backward writes fresh tensors (=); broadcast inputs get their gradient summed back.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

enum class BinaryOp { add, sub, mul, div };

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double s);

namespace cpu {
// out = a ∘ b where a, b are already expanded (stride-0 views) to out's shape.
void binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void scale_fwd(const Tensor& x, double s, Tensor& out);
}  // namespace cpu
namespace cuda {
void binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void scale_fwd(const Tensor& x, double s, Tensor& out);
}  // namespace cuda

}  // namespace st::ops
