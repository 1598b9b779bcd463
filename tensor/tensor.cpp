// Tensor: factories, metadata, element access and in-place primitives.
// The differentiable shape methods are in tensor/views.cpp.
#include "tensor/tensor.h"

#include <sstream>
#include <type_traits>

#include "tensor/autograd.h"
#include "tensor/device_ops.h"
#include "tensor/graph.h"

namespace st {

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ",";
  o << ")";
  return o.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t w = d < 0 ? d + ndim : d;
  if (w < 0 || w >= ndim) ST_THROW(ShapeError, op << ": dim " << d << " out of range for " << ndim << "-d tensor");
  return w;
}

TensorImpl& Tensor::impl() const {
  if (!impl_) ST_THROW(ValueError, "use of an undefined tensor");
  return *impl_;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    if (d < 0) ST_THROW(ShapeError, "empty: negative size in shape " << shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!t.storage()->released()) t.fill_(value);  // released: made under Storage::DeferAllocation
  return t;
}

namespace {
template <class V>
Tensor from_values(const std::vector<V>& values, const Shape& shape, DType dtype, Device device) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    ST_THROW(ShapeError, "from_vector: " << values.size() << " values for shape " << shape_str(shape));
  Tensor host = Tensor::empty(shape, dtype, Device::cpu);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d = host.data<T>();
    if constexpr (std::is_integral_v<V> && std::is_integral_v<T>) {
      // integers to integers directly: through a double, i64 values past 2^53 (seeds, the bit
      // patterns of doubles) would lose their low bits
      for (size_t i = 0; i < values.size(); ++i) d[i] = static_cast<T>(values[i]);
    } else {
      for (size_t i = 0; i < values.size(); ++i) d[i] = store_from_double<T>(static_cast<double>(values[i]));
    }
  });
  return device == Device::cpu ? host : host.to(device);
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, DType t, Device d) {
  return from_values(v, s, t, d);
}
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, DType t, Device d) {
  return from_values(v, s, t, d);
}
Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& s, Device d) {
  return from_values(v, s, DType::i32, d);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s, Device d) {
  return from_values(v, s, DType::i64, d);
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return from_values(v, {n}, dtype, device);
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expect) return false;
    expect *= shape()[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  std::ostringstream o;
  o << dtype_name(dtype()) << " " << device_name(device()) << " " << shape_str(shape());
  return o.str();
}

void* Tensor::data_ptr() const {
  auto& s = impl().storage;
  if (!s || !s->data()) return nullptr;
  return static_cast<char*>(s->data()) + offset() * static_cast<int64_t>(dtype_size(dtype()));
}

std::vector<double> Tensor::to_double() const {
  check_host_read("reading tensor values on the host (item / to_double)");
  Tensor host = (device() == Device::cpu ? *this : to(Device::cpu)).contiguous();
  std::vector<double> out(static_cast<size_t>(numel()));
  visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = host.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_double(d[i]);
  });
  return out;
}

std::vector<float> Tensor::to_float() const {
  std::vector<double> d = to_double();
  return std::vector<float>(d.begin(), d.end());
}

double Tensor::item() const {
  if (numel() != 1) ST_THROW(ShapeError, "item: tensor of shape " << shape_str(shape()) << " is not one element");
  return to_double()[0];
}

Tensor& Tensor::copy_(const Tensor& src) {
  if (shape() != src.shape())
    ST_THROW(ShapeError, "copy_: destination " << shape_str(shape()) << " vs source " << shape_str(src.shape()));
  if (device() == Device::cpu && src.device() == Device::cpu) {
    cpu::copy(*this, src);
  } else if (device() == Device::cuda && src.device() == Device::cuda) {
    cuda::copy(*this, src);
  } else {
    check_host_read(device() == Device::cuda ? "a host → device copy" : "a device → host copy");
    // Across the bus: move contiguous bytes of the destination dtype, cast/stride on one side.
    Tensor s = src;
    if (device() == Device::cuda) {  // host → device: prepare on the host
      if (s.dtype() != dtype() || !s.is_contiguous()) {
        Tensor tmp = empty(shape(), dtype(), Device::cpu);
        cpu::copy(tmp, s);
        s = tmp;
      }
      if (is_contiguous()) {
        cuda::copy(*this, s);
      } else {
        Tensor staged = empty(shape(), dtype(), Device::cuda);
        cuda::copy(staged, s);
        cuda::copy(*this, staged);
      }
    } else {  // device → host: prepare on the device
      if (s.dtype() != dtype() || !s.is_contiguous()) {
        Tensor tmp = empty(shape(), dtype(), Device::cuda);
        cuda::copy(tmp, s);
        s = tmp;
      }
      if (is_contiguous()) {
        cuda::copy(*this, s);
      } else {
        Tensor staged = empty(shape(), dtype(), Device::cpu);
        cuda::copy(staged, s);
        cpu::copy(*this, staged);
      }
    }
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  if (device() == Device::cpu)
    cpu::fill(*this, value);
  else
    cuda::fill(*this, value);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (shape() != other.shape())
    ST_THROW(ShapeError, "add_: " << shape_str(shape()) << " += " << shape_str(other.shape()));
  if (device() != other.device())
    ST_THROW(DeviceError, "add_: " << describe() << " += " << other.describe());
  if (device() == Device::cpu)
    cpu::add(*this, other, alpha);
  else
    cuda::add(*this, other, alpha);
  return *this;
}

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_floating(dtype()))
    ST_THROW(DTypeError, "requires_grad_: only floating tensors can require grad, this one is " << dtype_name(dtype()));
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && g.shape() != shape())
    ST_THROW(ShapeError, "set_grad: gradient " << shape_str(g.shape()) << " for tensor " << shape_str(shape()));
  impl().grad = g.impl_;
}

void Tensor::zero_grad(bool set_to_none) {
  if (set_to_none || !impl().grad)
    impl().grad.reset();
  else
    grad().fill_(0.0);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward(*this, grad, retain_graph); }

void Tensor::add_grad_ready_hook(GradHook hook) { impl().grad_ready_hooks.push_back(std::move(hook)); }
void Tensor::clear_grad_ready_hooks() { impl().grad_ready_hooks.clear(); }

Tensor& Tensor::set_name(std::string n) {
  impl().name = std::move(n);
  return *this;
}

}  // namespace st
