// The differentiable shape methods of Tensor. Each view shares storage with its input; its
// backward maps the gradient back to the input's shape (reshape back, transpose back, pad a
// narrow with zeros, slice a cat).
#include <algorithm>
#include <numeric>

#include "tensor/autograd.h"
#include "tensor/tensor.h"

namespace st {
namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Shape infer_shape(const Shape& want, int64_t numel, const Shape& have) {
  Shape out = want;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) ST_THROW(ShapeError, "reshape: more than one -1 in " << shape_str(want));
      infer = static_cast<int64_t>(i);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0 && known > 0 && numel % known == 0) out[infer] = numel / known;
  if (shape_numel(out) != numel)
    ST_THROW(ShapeError, "reshape: cannot view " << shape_str(have) << " as " << shape_str(want));
  return out;
}

}  // namespace

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

Tensor Tensor::view(const Shape& want) const {
  if (!is_contiguous()) ST_THROW(ShapeError, "view: tensor " << shape_str(shape()) << " is not contiguous");
  Shape s = infer_shape(want, numel(), shape());
  Tensor out = make_view(*this, s, contiguous_strides(s), offset());
  Shape in_shape = shape();
  attach_grad_fn(out, "view", {*this}, [in_shape](const Tensor& g) { return std::vector<Tensor>{g.reshape(in_shape)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& want) const { return is_contiguous() ? view(want) : contiguous().view(want); }

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> perm(static_cast<size_t>(dim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[wrap_dim(a, dim(), "transpose")], perm[wrap_dim(b, dim(), "transpose")]);
  return permute(perm);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (static_cast<int64_t>(dims.size()) != dim())
    ST_THROW(ShapeError, "permute: " << dims.size() << " dims for tensor " << shape_str(shape()));
  Shape s(dims.size()), st(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (inverse[d] != -1) ST_THROW(ShapeError, "permute: dim " << d << " repeated");
    inverse[d] = static_cast<int64_t>(i);
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, s, st, offset());
  attach_grad_fn(out, "permute", {*this}, [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0 || length < 0 || start + length > shape()[d])
    ST_THROW(ShapeError, "narrow: [" << start << ", " << start + length << ") out of range for dim " << d << " of "
                                     << shape_str(shape()));
  Shape s = shape();
  s[d] = length;
  Tensor out = make_view(*this, s, strides(), offset() + start * strides()[d]);
  Shape in_shape = shape();
  DType dt = dtype();
  Device dev = device();
  attach_grad_fn(out, "narrow", {*this}, [=](const Tensor& g) {
    Tensor full = Tensor::zeros(in_shape, dt, dev);
    full.narrow(d, start, length).copy_(g);
    return std::vector<Tensor>{full};
  });
  return out;
}

std::vector<Tensor> Tensor::split(int64_t chunk, int64_t d) const {
  d = wrap_dim(d, dim(), "split");
  if (chunk <= 0) ST_THROW(ValueError, "split: chunk must be positive, got " << chunk);
  std::vector<Tensor> parts;
  for (int64_t s = 0; s < shape()[d]; s += chunk) parts.push_back(narrow(d, s, std::min(chunk, shape()[d] - s)));
  return parts;
}

Tensor Tensor::cat(const std::vector<Tensor>& parts, int64_t d) {
  if (parts.empty()) ST_THROW(ValueError, "cat: no tensors");
  const Tensor& first = parts[0];
  d = wrap_dim(d, first.dim(), "cat");
  Shape s = first.shape();
  s[d] = 0;
  for (const Tensor& p : parts) {
    Shape ps = p.shape();
    if (p.dim() != first.dim()) ST_THROW(ShapeError, "cat: " << shape_str(ps) << " vs " << shape_str(first.shape()));
    for (int64_t i = 0; i < first.dim(); ++i)
      if (i != d && ps[i] != first.shape()[i])
        ST_THROW(ShapeError, "cat: " << shape_str(ps) << " vs " << shape_str(first.shape()) << " along dim " << d);
    if (p.dtype() != first.dtype() || p.device() != first.device())
      ST_THROW(DTypeError, "cat: " << p.describe() << " vs " << first.describe());
    s[d] += ps[d];
  }
  Tensor out = empty(s, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  {
    NoGradGuard ng;
    int64_t at = 0;
    for (const Tensor& p : parts) {
      out.narrow(d, at, p.shape()[d]).copy_(p);
      sizes.push_back(p.shape()[d]);
      at += p.shape()[d];
    }
  }
  attach_grad_fn(out, "cat", parts, [d, sizes](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t n : sizes) {
      grads.push_back(g.narrow(d, at, n));
      at += n;
    }
    return grads;
  });
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  attach_grad_fn(out, "clone", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = empty(shape(), t, device());
  out.copy_(*this);
  DType src = dtype();
  if (is_floating(t) && is_floating(src))
    attach_grad_fn(out, "cast", {*this}, [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = empty(shape(), dtype(), dev);
  out.copy_(*this);
  Device src = device();
  attach_grad_fn(out, "to_device", {*this}, [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
  return out;
}

}  // namespace st
