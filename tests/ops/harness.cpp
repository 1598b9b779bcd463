#include "tests/ops/harness.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tensor/autograd.h"
#include "tensor/rng.h"

namespace st::test {

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

namespace {

std::vector<Tensor> draw_inputs(const OpCase& c, Generator& gen) {
  std::vector<Tensor> xs;
  for (const Shape& s : c.shapes) {
    Tensor t = Tensor::empty(s);
    fill_uniform(t, gen, c.lo, c.hi);
    xs.push_back(t);
  }
  return xs;
}

bool wants_grad(const OpCase& c, size_t i) { return c.grad.empty() || c.grad[i]; }

// Runs the op on `inputs` converted to dtype/device; returns output and input gradients for
// cotangent u (all as double vectors).
struct Run {
  std::vector<double> out;
  std::vector<std::vector<double>> grads;
};
Run run_op(const OpCase& c, const std::vector<Tensor>& inputs, DType dtype, Device device,
           const std::vector<double>& u) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].to(dtype).to(device).detach();
    if (wants_grad(c, i)) x.requires_grad_();
    xs.push_back(x);
  }
  Tensor y = c.op(xs);
  Run r;
  r.out = y.to_double();
  bool any = false;
  for (size_t i = 0; i < xs.size(); ++i) any = any || wants_grad(c, i);
  if (any && !u.empty()) {
    Tensor ut = Tensor::from_vector(u, y.shape(), y.dtype(), device);
    y.backward(ut);
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor g = xs[i].grad();
    r.grads.push_back(g.defined() ? g.to_double() : std::vector<double>(static_cast<size_t>(xs[i].numel()), 0.0));
  }
  return r;
}

}  // namespace

void check_op(const OpCase& c) {
  SCOPED_TRACE("op case: " + c.name);
  Generator gen(c.seed * 7919 + 17);
  std::vector<Tensor> inputs = draw_inputs(c, gen);
  std::vector<std::vector<double>> xd;
  for (const Tensor& t : inputs) xd.push_back(t.to_double());

  // 1. forward, f32 vs double reference
  std::vector<double> ref = c.ref(xd);
  Tensor uu = Tensor::empty({static_cast<int64_t>(ref.size())});
  fill_uniform(uu, gen, -1.f, 1.f);
  std::vector<double> u = uu.to_double();
  Run f32 = run_op(c, inputs, DType::f32, Device::cpu, u);
  ASSERT_EQ(f32.out.size(), ref.size()) << "output size";
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(f32.out[i], ref[i], c.atol + c.rtol * std::fabs(ref[i])) << "forward element " << i;

  // 2. backward vs central differences of L(x) = Σ u·ref(x), in double
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!wants_grad(c, k)) continue;
    std::vector<std::vector<double>> xp = xd;
    for (size_t j = 0; j < xd[k].size(); ++j) {
      const double h = c.fd_h * std::max(1.0, std::fabs(xd[k][j]));
      xp[k][j] = xd[k][j] + h;
      std::vector<double> fp = c.ref(xp);
      xp[k][j] = xd[k][j] - h;
      std::vector<double> fm = c.ref(xp);
      xp[k][j] = xd[k][j];
      double d = 0;
      for (size_t i = 0; i < u.size(); ++i) d += u[i] * (fp[i] - fm[i]);
      d /= 2 * h;
      ASSERT_NEAR(f32.grads[k][j], d, c.grad_atol + c.grad_rtol * std::fabs(d))
          << "gradient of input " << k << " element " << j;
    }
  }

  // 3. f16 / bf16: same op on rounded inputs vs the reference on those rounded inputs
  if (!c.low_precision) return;
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    std::vector<Tensor> rounded;
    std::vector<std::vector<double>> rd;
    for (const Tensor& t : inputs) {
      rounded.push_back(t.to(dt).to(DType::f32));
      rd.push_back(rounded.back().to_double());
    }
    std::vector<double> rref = c.ref(rd);
    Run lp = run_op(c, rounded, dt, Device::cpu, u);
    Run hi = run_op(c, rounded, DType::f32, Device::cpu, u);
    double tol = dt == DType::f16 ? c.f16_tol : c.bf16_tol;
    EXPECT_LE(rel_err(lp.out, rref), tol) << "forward";
    for (size_t k = 0; k < inputs.size(); ++k)
      if (wants_grad(c, k)) {
        EXPECT_LE(rel_err(lp.grads[k], hi.grads[k]), 2 * tol) << "gradient of input " << k;
      }
  }
}

void check_op_against_cpu(const OpCase& c, Device device, DType dtype, double tol) {
  SCOPED_TRACE("op case: " + c.name + " on " + device_name(device) + " in " + dtype_name(dtype));
  Generator gen(c.seed * 104729 + 3);
  std::vector<Tensor> inputs = draw_inputs(c, gen);
  std::vector<Tensor> rounded;
  for (const Tensor& t : inputs) rounded.push_back(t.to(dtype).to(DType::f32));
  Tensor probe = c.op([&] {
    std::vector<Tensor> xs;
    for (const Tensor& t : rounded) xs.push_back(t.detach());
    return xs;
  }());
  Tensor uu = Tensor::empty(probe.shape());
  fill_uniform(uu, gen, -1.f, 1.f);
  std::vector<double> u = uu.to_double();
  Run ref = run_op(c, rounded, DType::f32, Device::cpu, u);
  Run dev = run_op(c, rounded, dtype, device, u);
  EXPECT_LE(rel_err(dev.out, ref.out), tol) << "forward";
  for (size_t k = 0; k < inputs.size(); ++k)
    if (wants_grad(c, k)) {
      EXPECT_LE(rel_err(dev.grads[k], ref.grads[k]), tol) << "gradient of input " << k;
    }
}

}  // namespace st::test
