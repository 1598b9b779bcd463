// Argument checks shared by the op entry points. Every failure throws a typed error whose
// message names the op and the offending shapes / dtypes / devices.
#pragma once
#include <initializer_list>

#include "tensor/tensor.h"

namespace st::ops {

void check_defined(const char* op, std::initializer_list<Tensor> ts);
void check_same_device(const char* op, std::initializer_list<Tensor> ts);
void check_same_dtype(const char* op, std::initializer_list<Tensor> ts);
void check_floating(const char* op, const Tensor& t);
void check_dtype(const char* op, const Tensor& t, std::initializer_list<DType> allowed);
void check_dim(const char* op, const Tensor& t, int64_t min_dim, int64_t max_dim);

// Throws DeviceError naming op unless t lives on `device`.
void check_device(const char* op, const Tensor& t, Device device);
// t as a contiguous tensor of dtype `dt` without autograd history (incoming gradients may be
// views or carry another dtype); t itself when it already is one.
Tensor contiguous_as(const Tensor& t, DType dt);

// Shape that a and b broadcast to (NumPy rules); throws ShapeError naming op and both shapes.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);

}  // namespace st::ops
