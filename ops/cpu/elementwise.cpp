#include <array>

#include "ops/cpu/common.h"
#include "ops/elementwise.h"
#include "tensor/cpu/strided.h"

namespace st::ops::cpu {

void binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  // a, b: expanded views (any strides) in out's dtype; compute in f32, round once on store.
  Tensor a32 = a.dtype() == DType::f32 ? a : a.to(DType::f32);
  Tensor b32 = b.dtype() == DType::f32 ? b : b.to(DType::f32);
  Tensor o32 = out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32);
  const float* pa = static_cast<const float*>(a32.data_ptr());
  const float* pb = static_cast<const float*>(b32.data_ptr());
  float* po = o32.data<float>();
  const Shape ostr = o32.strides();
  auto run = [&](auto f) {
    st::cpu::for_each_offset<3>(out.shape(), {&a32.strides(), &b32.strides(), &ostr},
                                [&](const std::array<int64_t, 3>& o) { po[o[2]] = f(pa[o[0]], pb[o[1]]); });
  };
  switch (op) {
    case BinaryOp::add: run([](float x, float y) { return x + y; }); break;
    case BinaryOp::sub: run([](float x, float y) { return x - y; }); break;
    case BinaryOp::mul: run([](float x, float y) { return x * y; }); break;
    case BinaryOp::div: run([](float x, float y) { return x / y; }); break;
  }
  if (!o32.same(out)) out.copy_(o32);
}

void scale_fwd(const Tensor& x, double s, Tensor& out) {
  Tensor x32 = as_f32(x);
  Tensor o32 = out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32);
  const float* px = x32.data<float>();
  float* po = o32.data<float>();
  const float fs = static_cast<float>(s);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = fs * px[i];
  if (!o32.same(out)) out.copy_(o32);
}

}  // namespace st::ops::cpu
