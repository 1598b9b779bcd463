#include "ops/check.h"

#include <sstream>

#include "tensor/autograd.h"

namespace st::ops {
namespace {
std::string list(std::initializer_list<Tensor> ts) {
  std::ostringstream o;
  bool first = true;
  for (const Tensor& t : ts) {
    o << (first ? "" : " vs ") << t.describe();
    first = false;
  }
  return o.str();
}
}  // namespace

void check_defined(const char* op, std::initializer_list<Tensor> ts) {
  int i = 0;
  for (const Tensor& t : ts) {
    if (!t.defined()) ST_THROW(ValueError, op << ": argument " << i << " is an undefined tensor");
    ++i;
  }
}

void check_same_device(const char* op, std::initializer_list<Tensor> ts) {
  check_defined(op, ts);
  for (const Tensor& t : ts)
    if (t.device() != ts.begin()->device()) ST_THROW(DeviceError, op << ": tensors on different devices: " << list(ts));
}

void check_same_dtype(const char* op, std::initializer_list<Tensor> ts) {
  check_defined(op, ts);
  for (const Tensor& t : ts)
    if (t.dtype() != ts.begin()->dtype()) ST_THROW(DTypeError, op << ": dtype mismatch: " << list(ts));
}

void check_floating(const char* op, const Tensor& t) {
  if (!is_floating(t.dtype())) ST_THROW(DTypeError, op << ": needs a floating tensor, got " << t.describe());
}

void check_dtype(const char* op, const Tensor& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  ST_THROW(DTypeError, op << ": unsupported dtype " << t.describe());
}

void check_dim(const char* op, const Tensor& t, int64_t min_dim, int64_t max_dim) {
  if (t.dim() < min_dim || t.dim() > max_dim)
    ST_THROW(ShapeError, op << ": expected " << min_dim << ".." << max_dim << " dims, got " << shape_str(t.shape()));
}

void check_device(const char* op, const Tensor& t, Device device) {
  if (t.device() != device)
    ST_THROW(DeviceError, op << ": expected a " << device_name(device) << " tensor, got " << t.describe());
}

Tensor contiguous_as(const Tensor& t, DType dt) {
  NoGradGuard ng;
  Tensor r = t.dtype() == dt ? t : t.to(dt);
  return r.is_contiguous() ? r.detach() : r.contiguous().detach();
}

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      ST_THROW(ShapeError, op << ": shapes " << shape_str(a) << " and " << shape_str(b) << " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace st::ops
