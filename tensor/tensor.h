// Tensor: a view (shape, strides, offset, dtype) of a shared Storage, plus autograd state.
//
// Copies of a Tensor share one TensorImpl (like a shared_ptr); views share the Storage.
// Ops live in ops/ and mostly want contiguous inputs (call contiguous()). The shape methods here
// (view, reshape, transpose, permute, narrow, split, cat, to, contiguous, clone) are
// differentiable; the in-place methods (copy_, fill_, add_) are not and are meant for gradients,
// optimizers and initialisation.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/storage.h"

namespace st {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(2, 3, 4)"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Tensor;
struct Node;
// Called once the tensor's gradient for the current backward pass is final (see autograd.h).
using GradHook = std::function<void(const Tensor& param)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t grad_fn_output = 0;  // which of grad_fn's outputs this tensor is (ops with several outputs)
  std::vector<GradHook> grad_ready_hooks;
  std::string name;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories --------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu);
  // Values are converted to `dtype` (rounded for f16/bf16).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape,
                            Device device = Device::cpu);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                            Device device = Device::cpu);
  static Tensor arange(int64_t n, DType dtype = DType::i64, Device device = Device::cpu);
  Tensor empty_like() const { return empty(shape(), dtype(), device()); }
  Tensor zeros_like() const { return zeros(shape(), dtype(), device()); }

  // ---- metadata ---------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage ? impl().storage->device() : Device::cpu; }
  bool is_cuda() const { return device() == Device::cuda; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string describe() const;  // "f32 cpu (2, 3)"

  void* data_ptr() const;  // first element of this view
  template <class T>
  T* data() const {
    check_type<T>();
    return static_cast<T*>(data_ptr());
  }

  // Element values as double / float (copied to the CPU; any dtype, any strides). For tests.
  std::vector<double> to_double() const;
  std::vector<float> to_float() const;
  double item() const;  // one-element tensors

  // ---- views and shape (differentiable) --------------------------------------------------
  Tensor view(const Shape& shape) const;  // contiguous only; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten() const { return reshape({numel()}); }
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> split(int64_t chunk, int64_t dim) const;  // pieces of `chunk` (last smaller)
  static Tensor cat(const std::vector<Tensor>& parts, int64_t dim);
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor detach() const;  // same storage, no autograd history

  // ---- in place (not differentiable) -----------------------------------------------------
  Tensor& copy_(const Tensor& src);  // same shape; any dtype, device and strides
  Tensor& fill_(double value);
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha·other, same shape

  // ---- autograd ---------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g);  // adopt g as the gradient buffer (e.g. a view of a DP bucket)
  void zero_grad(bool set_to_none = false);
  // Backpropagates from this tensor. `grad` defaults to ones for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  void add_grad_ready_hook(GradHook hook);
  void clear_grad_ready_hooks();
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string n);

  TensorImpl* impl_ptr() const { return impl_.get(); }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  TensorImpl& impl() const;
  template <class T>
  void check_type() const;
  std::shared_ptr<TensorImpl> impl_;
};

template <class T>
void Tensor::check_type() const {
  bool ok = visit_dtype(dtype(), [](auto tag) { return std::is_same_v<decltype(tag), T>; });
  if (!ok) ST_THROW(DTypeError, "data<T>(): tensor is " << dtype_name(dtype()) << ", another type was asked for");
}

// Normalises a possibly negative dim against `ndim`; throws ShapeError naming `op`.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);

}  // namespace st
