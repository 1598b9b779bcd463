// Optimizers against closed forms computed here in double: AdamW (PyTorch's: decoupled decay on
// ≥ 2-dim tensors only, bias-corrected moments), SGD with momentum; state dicts (names, strict
// loading, bit-exact continuation); f16/bf16 parameters with f32 masters; AdamW's snapshot block
// (what a device step asked for it left there, each tensor's copy found by snapshot_copy).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/step_state.h"
#include "runtime/optim/optimizer.h"

namespace st::runtime {
namespace {

std::vector<double> grad_values(int64_t n, int step) {
  std::vector<double> g;
  for (int64_t i = 0; i < n; ++i) g.push_back(std::sin(0.7 * static_cast<double>(i) + step) * 0.5);
  return g;
}

struct Ref {
  std::vector<double> p, m, v;
};

// torch.optim.AdamW, one tensor, in double.
void adamw_ref(Ref& r, const std::vector<double>& g, int t, double lr, double b1, double b2, double eps, double wd) {
  for (size_t i = 0; i < r.p.size(); ++i) {
    r.p[i] *= 1 - lr * wd;
    r.m[i] = b1 * r.m[i] + (1 - b1) * g[i];
    r.v[i] = b2 * r.v[i] + (1 - b2) * g[i] * g[i];
    double mh = r.m[i] / (1 - std::pow(b1, t)), vh = r.v[i] / (1 - std::pow(b2, t));
    r.p[i] -= lr * mh / (std::sqrt(vh) + eps);
  }
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << " [" << i << "]";
}

TEST(AdamW, MatchesClosedFormAndDecaysOnlyMatrices) {
  std::vector<double> w0 = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, b0 = {0.5, -0.5, 0.25};
  Tensor w = Tensor::from_vector(w0, {2, 3}), b = Tensor::from_vector(b0, {3});
  AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  AdamW opt({{"w", w}, {"b", b}}, o);
  Ref rw{w0, std::vector<double>(6), std::vector<double>(6)}, rb{b0, std::vector<double>(3), std::vector<double>(3)};
  for (int t = 1; t <= 4; ++t) {
    auto gw = grad_values(6, t), gb = grad_values(3, 10 + t);
    opt.step({Tensor::from_vector(gw, {2, 3}), Tensor::from_vector(gb, {3})}, o.lr);
    adamw_ref(rw, gw, t, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
    adamw_ref(rb, gb, t, o.lr, o.beta1, o.beta2, o.eps, 0.0);  // a 1-dim tensor: no decay
  }
  EXPECT_EQ(opt.steps_taken(), 4);
  expect_close(w.to_double(), rw.p, 2e-6, "w");
  expect_close(b.to_double(), rb.p, 2e-6, "b");
  // with decay on the bias the result would differ measurably
  Ref wrong{b0, std::vector<double>(3), std::vector<double>(3)};
  for (int t = 1; t <= 4; ++t) adamw_ref(wrong, grad_values(3, 10 + t), t, o.lr, o.beta1, o.beta2, o.eps, 0.1);
  EXPECT_GT(std::fabs(wrong.p[0] - b.to_double()[0]), 1e-5);
}

TEST(Sgd, MomentumClosedForm) {
  std::vector<double> w0 = {1.0, -2.0, 0.5, 0.25};
  Tensor w = Tensor::from_vector(w0, {2, 2});
  Sgd opt({{"w", w}}, SgdOptions{0.1, 0.9, 0.01});
  std::vector<double> p = w0, buf(4);
  for (int t = 1; t <= 3; ++t) {
    auto g = grad_values(4, t);
    opt.step({Tensor::from_vector(g, {2, 2})}, 0.1);
    for (size_t i = 0; i < 4; ++i) {
      double gi = g[i] + 0.01 * p[i];
      buf[i] = t == 1 ? gi : 0.9 * buf[i] + gi;
      p[i] -= 0.1 * buf[i];
    }
  }
  expect_close(w.to_double(), p, 1e-6, "sgd");
}

TEST(Optimizer, StateDictNamesAndBitExactContinuation) {
  auto make = [] {
    return NamedTensors{{"layer.weight", Tensor::from_vector(std::vector<double>{0.1, 0.2, 0.3, 0.4}, {2, 2})},
                        {"layer.bias", Tensor::from_vector(std::vector<double>{0.0, 1.0}, {2})}};
  };
  AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  auto pa = make();
  AdamW a(pa, o);
  auto g = [](int t) {
    return std::vector<Tensor>{Tensor::from_vector(grad_values(4, t), {2, 2}), Tensor::from_vector(grad_values(2, t), {2})};
  };
  a.step(g(1), o.lr);
  a.step(g(2), o.lr);
  std::map<std::string, Tensor> saved;
  std::vector<std::string> keys;
  for (auto& [k, t] : a.state_dict()) {
    saved[k] = t.clone();
    keys.push_back(k);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "exp_avg.layer.weight", "exp_avg.layer.bias", "exp_avg_sq.layer.weight",
                                            "exp_avg_sq.layer.bias"}));
  EXPECT_EQ(saved["step"].to_double()[0], 2.0);
  // a second optimizer over the same weights, restored, continues bit-exactly
  auto pb = make();
  for (size_t i = 0; i < pb.size(); ++i) pb[i].second.copy_(pa[i].second);
  AdamW b(pb, o);
  b.load_state_dict(saved);
  EXPECT_EQ(b.steps_taken(), 2);
  a.step(g(3), o.lr);
  b.step(g(3), o.lr);
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].second.to_double(), pb[i].second.to_double());

  auto missing = saved;
  missing.erase("exp_avg_sq.layer.bias");
  try {
    b.load_state_dict(missing);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg_sq.layer.bias"), std::string::npos) << e.what();
  }
  auto extra = saved;
  extra["exp_avg.other"] = Tensor::zeros({1});
  EXPECT_THROW(b.load_state_dict(extra), ValueError);
}

TEST(Optimizer, AdamWsSnapshotBlockHoldsWhatItsAskingStepLeft) {
  NamedTensors params{{"w", Tensor::from_vector(std::vector<double>{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3})},
                      {"b", Tensor::from_vector(std::vector<double>{0.0, 1.0, -1.0}, {3})}};
  AdamW a(params, AdamWOptions{1e-2, 0.9, 0.95, 1e-8, 0.1});
  ASSERT_TRUE(a.keep_snapshot());
  // w: 3 · 8 floats (6 padded to 8), b: 3 · 4, each part at a 64-float (256-byte) boundary
  EXPECT_EQ(a.snapshot_block().numel(), 128);
  auto state = [&](int64_t t, bool snapshot) {
    ops::DeviceStepState st;
    st.with_wd = ops::adamw_scalars({1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}, t);
    st.no_wd = ops::adamw_scalars({1e-2f, 0.9f, 0.95f, 1e-8f, 0.f}, t);
    st.snapshot = snapshot ? 1 : 0;
    return ops::step_state_tensor(st, Device::cpu);
  };
  auto grads = [](int t) {
    return std::vector<Tensor>{Tensor::from_vector(grad_values(6, t), {2, 3}), Tensor::from_vector(grad_values(3, t), {3})};
  };
  auto saved = [&] {  // every tensor a checkpoint takes from the optimizer, with its copy
    NamedTensors all = a.master_weights();
    for (auto& [k, t] : a.state_dict())
      if (k != "step") all.emplace_back(k, t);
    return all;
  };
  a.step_on_device(grads(1), state(1, true));
  ASSERT_EQ(saved().size(), 6u);
  std::vector<std::vector<double>> first;
  for (auto& [k, t] : saved()) {
    SCOPED_TRACE(k);
    const Tensor c = a.snapshot_copy(t);
    ASSERT_TRUE(c.defined());
    EXPECT_EQ(c.shape(), t.shape());
    EXPECT_EQ(c.to_double(), t.to_double());
    first.push_back(c.to_double());
  }
  a.step_on_device(grads(2), state(2, false));  // not asked: the copies stay step 1's
  size_t i = 0;
  for (auto& [k, t] : saved()) {
    EXPECT_EQ(a.snapshot_copy(t).to_double(), first[i]) << k;
    EXPECT_NE(t.to_double(), first[i++]) << k << " moved at step 2";
  }
  EXPECT_FALSE(a.snapshot_copy(Tensor::zeros({2, 3})).defined()) << "not the optimizer's";
  EXPECT_TRUE(a.snapshot_copy(params[0].second).defined()) << "f32: the model's own tensor is the master";
  EXPECT_FALSE(a.snapshot_copy(params[0].second.narrow(0, 0, 1)).defined()) << "a part of a tensor is not copied alone";
  Sgd sgd(NamedTensors{{"w", Tensor::zeros({2})}}, SgdOptions{});
  EXPECT_FALSE(sgd.keep_snapshot());
  EXPECT_FALSE(sgd.snapshot_block().defined());
}

TEST(Optimizer, LowPrecisionParamsGetF32Masters) {
  Tensor w = Tensor::from_vector(std::vector<double>{1.0 / 3, 2.0 / 3, 1e-4, -5.0}, {2, 2});
  NamedTensors params{{"w", w}};
  AdamW opt(params, AdamWOptions{1e-3, 0.9, 0.95, 1e-8, 0.0}, DType::f16);
  EXPECT_EQ(w.dtype(), DType::f16);                // the model's tensor now computes in f16
  EXPECT_EQ(opt.master(0).dtype(), DType::f32);
  EXPECT_FLOAT_EQ(static_cast<float>(opt.master(0).to_double()[0]), 1.f / 3.f);  // not rounded to f16
  for (int t = 1; t <= 3; ++t) opt.step({Tensor::from_vector(grad_values(4, t), {2, 2})}, 1e-3);
  auto m = opt.master(0).to_double(), p = w.to_double();
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(p[i], f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(m[i]))));
  // the small update on 1e-4 is kept in the master even where f16 could not hold it exactly
  EXPECT_NE(m[2], 1e-4);
  std::vector<std::string> keys;
  for (auto& [k, t] : opt.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys.back(), "master.w");
}

TEST(Optimizer, RejectsMismatchedGradients) {
  Tensor w = Tensor::zeros({2, 2});
  AdamW opt({{"w", w}}, AdamWOptions{});
  EXPECT_THROW(opt.step({}, 1e-3), ValueError);
  EXPECT_THROW(opt.step({Tensor::zeros({4})}, 1e-3), ShapeError);
  EXPECT_THROW(AdamW({{"w", w}, {"w", w}}, AdamWOptions{}), ValueError);
}

}  // namespace
}  // namespace st::runtime
