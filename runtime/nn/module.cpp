// Module: parameter registry, state dict and in-place dtype/device conversion.
#include "runtime/nn/module.h"

#include <set>

#include "tensor/autograd.h"

namespace st::runtime {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  ST_CHECK(!name.empty(), ValueError, "register_parameter: empty name");
  ST_CHECK(t.defined(), ValueError, "register_parameter: '" << name << "' is undefined");
  for (const auto& [n, p] : params_)
    ST_CHECK(n != name, ValueError, "register_parameter: '" << name << "' registered twice");
  ST_CHECK(t.is_leaf(), ValueError, "register_parameter: '" << name << "' is not a leaf tensor");
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  ST_CHECK(child != nullptr, ValueError, "register_module: '" << name << "' is null");
  children_.emplace_back(name, std::move(child));
}

void Module::collect(const std::string& prefix, NamedTensors& out, std::map<const TensorImpl*, std::string>& seen,
                     std::map<std::string, const TensorImpl*>& names) const {
  auto join = [&](const std::string& n) { return prefix.empty() ? n : n.empty() ? prefix : prefix + "." + n; };
  for (const auto& [n, p] : params_) {
    std::string full = join(n);
    auto nm = names.find(full);
    if (nm != names.end() && nm->second != p.impl_ptr())
      ST_THROW(ValueError, "module: two different tensors are both named '" << full << "'");
    names[full] = p.impl_ptr();
    if (seen.count(p.impl_ptr())) continue;  // tied: listed under its first name
    seen[p.impl_ptr()] = full;
    out.emplace_back(full, p);
  }
  for (const auto& [n, c] : children_) c->collect(join(n), out, seen, names);
}

NamedTensors Module::named_parameters(const std::string& prefix) const {
  NamedTensors out;
  std::map<const TensorImpl*, std::string> seen;
  std::map<std::string, const TensorImpl*> names;
  collect(prefix, out, seen, names);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

int64_t Module::param_bytes() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += static_cast<int64_t>(p.nbytes());
  return n;
}

Tensor Module::parameter(const std::string& full_name) const {
  for (auto& [n, p] : named_parameters())
    if (n == full_name) return p;
  ST_THROW(ValueError, "module: no parameter named '" << full_name << "'");
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, p] : named_parameters()) out.emplace_back(n, p.detach());
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& sd, bool strict) {
  NamedTensors mine = named_parameters();
  std::set<std::string> known;
  // Check everything before writing anything, so a failed load leaves the model untouched.
  for (auto& [n, p] : mine) {
    known.insert(n);
    auto it = sd.find(n);
    ST_CHECK(it != sd.end(), ValueError, "load_state_dict: missing key '" << n << "'");
    ST_CHECK(it->second.shape() == p.shape(), ValueError,
             "load_state_dict: '" << n << "' has shape " << shape_str(it->second.shape()) << ", the model expects "
                                  << shape_str(p.shape()));
    ST_CHECK(is_floating(it->second.dtype()), ValueError,
             "load_state_dict: '" << n << "' is " << dtype_name(it->second.dtype()) << ", expected a floating tensor");
  }
  if (strict)
    for (auto& [n, t] : sd)
      ST_CHECK(known.count(n), ValueError, "load_state_dict: unexpected key '" << n << "'");
  NoGradGuard ng;
  for (auto& [n, p] : mine) {
    Tensor dst = p.detach();
    dst.copy_(sd.at(n));
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) p.zero_grad(set_to_none);
}

void replace_tensor_data(const Tensor& param, const Tensor& src) {
  ST_CHECK(param.shape() == src.shape(), ShapeError,
           "replace_tensor_data: " << shape_str(param.shape()) << " vs " << shape_str(src.shape()));
  Tensor c = src.detach().contiguous();
  TensorImpl* impl = param.impl_ptr();
  impl->storage = c.storage();
  impl->offset = c.offset();
  impl->strides = c.strides();
  impl->dtype = c.dtype();
  impl->grad.reset();
}

void Module::cast_parameters(DType dtype) {
  ST_CHECK(is_floating(dtype), DTypeError, "cast_parameters: " << dtype_name(dtype) << " is not a floating type");
  NoGradGuard ng;
  for (auto& p : parameters())
    if (p.dtype() != dtype) replace_tensor_data(p, p.detach().to(dtype));
}

void Module::move_parameters(Device device) {
  NoGradGuard ng;
  for (auto& p : parameters())
    if (p.device() != device) replace_tensor_data(p, p.detach().to(device));
}

}  // namespace st::runtime
