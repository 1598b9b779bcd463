#include "ops/reduce.h"

#include <algorithm>

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced)
      out.push_back(s[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::vector<int64_t> normalise(const Tensor& x, std::vector<int64_t> dims, const char* op) {
  for (auto& d : dims) d = wrap_dim(d, x.dim(), op);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    ST_THROW(ShapeError, op << ": repeated dim for " << shape_str(x.shape()));
  return dims;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  check_defined("sum", {x});
  check_floating("sum", x);
  dims = normalise(x, dims, "sum");
  Shape kept = reduced_shape(x.shape(), dims, true);
  Tensor out32 = Tensor::empty(kept, x.is_cuda() ? x.dtype() : DType::f32, x.device());
  if (x.is_cuda())
    cuda::sum_fwd(x, out32);
  else
    cpu::sum_fwd(x, out32);
  Tensor out = out32.dtype() == x.dtype() ? out32 : out32.to(x.dtype());
  if (!keepdim) out = out.view(reduced_shape(x.shape(), dims, false));
  out = out.detach();
  Shape in_shape = x.shape();
  attach_grad_fn(out, "sum", {x}, [in_shape, kept](const Tensor& g) {
    return std::vector<Tensor>{expand(g.reshape(kept), in_shape).contiguous()};
  });
  return out;
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i) all[i] = i;
  return sum(x, all, false);
}

Tensor argmax(const Tensor& x) {
  check_defined("argmax", {x});
  check_floating("argmax", x);
  ST_CHECK(x.dim() >= 1 && x.size(-1) > 0, ShapeError, "argmax: needs a non-empty last dim, got " << shape_str(x.shape()));
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  const int64_t V = x.size(-1), R = x.numel() / V;
  Tensor rows = x.contiguous().reshape({R, V});  // (R, V)
  Tensor out = Tensor::empty({R}, DType::i64, x.device());
  if (x.is_cuda())
    cuda::argmax_fwd(rows, out);
  else
    cpu::argmax_fwd(rows, out);
  return out.view(lead);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Shape b = broadcast_shape("expand", x.shape(), shape);
  if (b != shape) ST_THROW(ShapeError, "expand: " << shape_str(x.shape()) << " cannot expand to " << shape_str(shape));
  const int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < x.dim(); ++i) strides[lead + i] = x.shape()[i] == 1 ? 0 : x.strides()[i];
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->offset = x.offset();
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = x.dtype();
  Tensor out(std::move(impl));
  Shape in_shape = x.shape();
  attach_grad_fn(out, "expand", {x}, [in_shape](const Tensor& g) { return std::vector<Tensor>{sum_to_shape(g, in_shape)}; });
  return out;
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || shape[i - lead] == 1) dims.push_back(i);
  Tensor s = sum(g, dims, /*keepdim=*/true);
  return s.reshape(shape);
}

}  // namespace st::ops
