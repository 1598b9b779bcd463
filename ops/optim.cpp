#include "ops/optim.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "ops/check.h"

namespace st::ops {
namespace {

void check_state(const char* op, const Tensor& param, const Tensor& grad, std::initializer_list<Tensor> f32_state) {
  check_defined(op, {param, grad});
  check_same_device(op, {param, grad});
  check_dtype(op, param, {DType::f32});
  check_floating(op, grad);
  if (grad.shape() != param.shape())
    ST_THROW(ShapeError, op << ": param " << param.describe() << " and grad " << grad.describe() << " differ in shape");
  for (const Tensor& t : f32_state) {
    check_defined(op, {t});
    check_device(op, t, param.device());
    check_dtype(op, t, {DType::f32});
    if (t.shape() != param.shape())
      ST_THROW(ShapeError, op << ": state " << t.describe() << " does not match param " << param.describe());
    if (!t.is_contiguous()) ST_THROW(ValueError, op << ": state " << t.describe() << " must be contiguous");
  }
  if (!param.is_contiguous()) ST_THROW(ValueError, op << ": param " << param.describe() << " must be contiguous");
}

// The checks of adamw_step for one slot of adamw_step_multi, each error naming slot k.
void check_slot(size_t k, const AdamWSlot& sl, Device device) {
  constexpr const char* op = "adamw_step_multi";
  ST_CHECK(sl.param && sl.grad && sl.m && sl.v, ValueError, op << ": slot " << k << ": null tensor pointer");
  const Tensor& p = *sl.param;
  const char* const roles[] = {"param", "grad", "exp_avg", "exp_avg_sq", "param_lp"};
  const Tensor* const ts[] = {sl.param, sl.grad, sl.m, sl.v, &sl.param_lp};
  for (int i = 0; i < 5; ++i) {
    const Tensor& t = *ts[i];
    const char* role = roles[i];
    if (i == 4 && !t.defined()) continue;  // no low-precision copy
    ST_CHECK(t.defined(), ValueError, op << ": slot " << k << ": " << role << " is undefined");
    ST_CHECK(t.device() == device, DeviceError,
             op << ": slot " << k << ": " << role << " " << t.describe() << " is not on " << device_name(device)
                << " like slot 0's param");
    if (i == 1)
      ST_CHECK(is_floating(t.dtype()), DTypeError,
               op << ": slot " << k << ": grad " << t.describe() << " is not float");
    else if (i == 4)
      ST_CHECK(t.dtype() == DType::f16 || t.dtype() == DType::bf16, DTypeError,
               op << ": slot " << k << ": param_lp " << t.describe() << " must be f16/bf16");
    else
      ST_CHECK(t.dtype() == DType::f32, DTypeError,
               op << ": slot " << k << ": " << role << " " << t.describe() << " must be f32");
    ST_CHECK(t.shape() == p.shape(), ShapeError,
             op << ": slot " << k << ": " << role << " " << t.describe() << " does not match param " << p.describe());
    ST_CHECK(i == 1 || t.is_contiguous(), ValueError,
             op << ": slot " << k << ": " << role << " " << t.describe() << " must be contiguous");
  }
  check_adamw_snapshot(op, k, sl);
}

GradScaleF32 to_f32(const GradScale& gs) {
  return {static_cast<float>(gs.unscale), static_cast<float>(gs.clip)};
}

}  // namespace

void check_adamw_snapshot(const char* op, size_t k, const AdamWSlot& sl) {
  const Tensor& b = sl.snapshot;
  if (!b.defined()) return;
  const int64_t need = adamw_snapshot_floats(sl.param->numel());
  ST_CHECK(b.dtype() == DType::f32 && b.is_contiguous() && b.numel() >= need, ValueError,
           op << ": slot " << k << ": snapshot " << b.describe() << " must be contiguous f32 of at least " << need
              << " elements");
  ST_CHECK(b.device() == sl.param->device(), DeviceError,
           op << ": slot " << k << ": snapshot " << b.describe() << " is not on the param's device");
}

double decimal_widen(float f) {
  if (!std::isfinite(f)) return static_cast<double>(f);
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);  // shortest round-trip form
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

AdamWScalars adamw_scalars(const AdamWParams& p, int64_t step) {
  if (step < 1) ST_THROW(ValueError, "adamw_step: step counts from 1, got " << step);
  const double lr = decimal_widen(p.lr), b1 = decimal_widen(p.beta1), b2 = decimal_widen(p.beta2);
  const double eps = decimal_widen(p.eps), wd = decimal_widen(p.weight_decay);
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  AdamWScalars s;
  s.decay = wd != 0.0 ? static_cast<float>(1.0 - lr * wd) : 1.f;
  s.lerp_w = static_cast<float>(1.0 - b1);
  s.beta2 = static_cast<float>(b2);
  s.one_minus_b2 = static_cast<float>(1.0 - b2);
  s.bc2_sqrt = static_cast<float>(std::pow(bc2, 0.5));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-(lr / bc1));
  return s;
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p, int64_t step,
                Tensor param_lp, const GradScale& gs) {
  check_state("adamw_step", param, grad, {m, v});
  if (param_lp.defined()) {
    check_device("adamw_step", param_lp, param.device());
    check_dtype("adamw_step", param_lp, {DType::f16, DType::bf16});
    if (param_lp.shape() != param.shape() || !param_lp.is_contiguous())
      ST_THROW(ShapeError, "adamw_step: low-precision copy " << param_lp.describe() << " for param " << param.describe());
  }
  AdamWScalars s = adamw_scalars(p, step);
  Tensor g = contiguous_as(grad, grad.dtype());
  if (param.is_cuda())
    cuda::adamw_step(param, g, m, v, s, param_lp, to_f32(gs));
  else
    cpu::adamw_step(param, g, m, v, s, param_lp, to_f32(gs));
}

void adamw_step_multi(const std::vector<AdamWSlot>& slots, const GradScale& gs) {
  if (slots.empty()) return;
  const Device device = slots.front().param ? slots.front().param->device() : Device::cpu;
  bool all_contiguous = true;
  for (size_t k = 0; k < slots.size(); ++k) {
    check_slot(k, slots[k], device);
    all_contiguous &= slots[k].grad->is_contiguous();
  }
  const std::vector<AdamWSlot>* use = &slots;
  std::vector<Tensor> copies;  // the rare non-contiguous gradients, made contiguous
  std::vector<AdamWSlot> fixed;
  if (!all_contiguous) {
    copies.reserve(slots.size());  // no reallocation: fixed points into it
    fixed = slots;
    for (AdamWSlot& sl : fixed)
      if (!sl.grad->is_contiguous()) {
        copies.push_back(contiguous_as(*sl.grad, sl.grad->dtype()));
        sl.grad = &copies.back();
      }
    use = &fixed;
  }
  if (device == Device::cuda)
    cuda::adamw_step_multi(*use, to_f32(gs));
  else
    cpu::adamw_step_multi(*use, to_f32(gs));
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, const GradScale& gs) {
  if (momentum != 0.f)
    check_state("sgd_step", param, grad, {momentum_buf});
  else
    check_state("sgd_step", param, grad, {});
  Tensor g = contiguous_as(grad, grad.dtype());
  if (param.is_cuda())
    cuda::sgd_step(param, g, momentum_buf, lr, momentum, weight_decay, first_step, to_f32(gs));
  else
    cpu::sgd_step(param, g, momentum_buf, lr, momentum, weight_decay, first_step, to_f32(gs));
}

GradStats grad_stats(const std::vector<Tensor>& grads, const std::vector<double>& weights, double inv_scale) {
  if (!weights.empty() && weights.size() != grads.size())
    ST_THROW(ValueError, "grad_stats: " << weights.size() << " weights for " << grads.size() << " gradients");
  if (grads.empty()) return {};
  std::vector<Tensor> cs;
  cs.reserve(grads.size());
  for (const Tensor& g : grads) {
    check_defined("grad_stats", {g});
    check_floating("grad_stats", g);
    check_device("grad_stats", g, grads.front().device());
    cs.push_back(contiguous_as(g, g.dtype()));  // g itself when contiguous (views included)
  }
  const std::vector<double> w = weights.empty() ? std::vector<double>(grads.size(), 1.0) : weights;
  const float fs = static_cast<float>(inv_scale);
  return cs.front().is_cuda() ? cuda::grad_stats(cs, w, fs) : cpu::grad_stats(cs, w, fs);
}

double sum_squares(const Tensor& x) {
  check_defined("sum_squares", {x});
  check_floating("sum_squares", x);
  Tensor c = contiguous_as(x, x.dtype());
  return x.is_cuda() ? cuda::sum_squares(c) : cpu::sum_squares(c);
}

bool has_inf_nan(const Tensor& x) {
  check_defined("has_inf_nan", {x});
  check_floating("has_inf_nan", x);
  Tensor c = contiguous_as(x, x.dtype());
  return x.is_cuda() ? cuda::has_inf_nan(c) : cpu::has_inf_nan(c);
}

void scale_(Tensor& x, double s) {
  check_defined("scale_", {x});
  check_floating("scale_", x);
  if (!x.is_contiguous()) ST_THROW(ValueError, "scale_: needs a contiguous tensor, got " << x.describe());
  if (x.is_cuda())
    cuda::scale_(x, s);
  else
    cpu::scale_(x, s);
}

}  // namespace st::ops
