// Optimizer kernels against closed forms written out in double: AdamW (docs/design.md, PyTorch's
// decoupled decay, bias-corrected moments) and SGD with momentum for three steps each, decay
// only where the caller asks; plus sum_squares, has_inf_nan and scale_; the multi-tensor AdamW
// against the per-tensor op, bit for bit, and its snapshot blocks (what the step left, also when
// the step state skips; untouched when it does not ask).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/optim.h"
#include "ops/step_state.h"

using namespace st;

namespace {

struct AdamRef {  // the textbook update in double
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, double lr, double b1, double b2, double eps, double wd, int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

const std::vector<std::vector<double>> kGrads = {
    {0.5, -0.25, 1e-3, 2.0, -3.0}, {0.1, 0.4, -2e-3, -1.0, -2.5}, {-0.3, 0.2, 5e-4, 0.5, 1.0}};
const std::vector<double> kP0 = {1.0, -0.5, 0.25, 2.0, -1.5};

}  // namespace

TEST(Optim, AdamWThreeStepsClosedForm) {
  for (float wd : {0.f, 0.1f}) {  // decay only when the caller passes wd > 0
    SCOPED_TRACE("weight_decay " + std::to_string(wd));
    ops::AdamWParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, wd};
    Tensor p = Tensor::from_vector(kP0, {5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
    Tensor lp = Tensor::zeros({5}, DType::bf16);
    AdamRef r{kP0, std::vector<double>(5, 0.0), std::vector<double>(5, 0.0)};
    for (int t = 1; t <= 3; ++t) {
      Tensor g = Tensor::from_vector(kGrads[t - 1], {5});
      ops::adamw_step(p, g, m, v, hp, t, lp);
      r.step(kGrads[t - 1], 1e-2, 0.9, 0.999, 1e-8, wd == 0.f ? 0.0 : 0.1, t);
      auto pd = p.to_double(), md = m.to_double(), vd = v.to_double();
      for (size_t i = 0; i < 5; ++i) {
        EXPECT_NEAR(pd[i], r.p[i], 2e-6 * std::max(1.0, std::fabs(r.p[i]))) << "step " << t << " p " << i;
        EXPECT_NEAR(md[i], r.m[i], 1e-6 * std::max(1e-3, std::fabs(r.m[i]))) << "step " << t << " m " << i;
        EXPECT_NEAR(vd[i], r.v[i], 1e-6 * std::max(1e-6, std::fabs(r.v[i]))) << "step " << t << " v " << i;
      }
      EXPECT_EQ(lp.to_double(), p.to(DType::bf16).to_double()) << "low-precision copy is p rounded once";
    }
    // without decay the first step moves each p by lr·sign(g) (|g| ≫ eps)
    if (wd == 0.f) {
      EXPECT_NE(p.to_double()[0], kP0[0]);
    }
  }
}

TEST(Optim, AdamWDecayIsDecoupled) {
  // zero gradient: moments stay 0, the update is 0/(0 + eps) = 0, so only p·(1 − lr·wd) acts
  ops::AdamWParams hp{0.5f, 0.9f, 0.999f, 1e-8f, 0.2f};
  Tensor p = Tensor::from_vector(std::vector<double>{2.0, -4.0}, {2}), m = Tensor::zeros({2}), v = Tensor::zeros({2});
  for (int t = 1; t <= 3; ++t) ops::adamw_step(p, Tensor::zeros({2}, DType::bf16), m, v, hp, t);
  EXPECT_NEAR(p.to_double()[0], 2.0 * std::pow(0.9, 3), 1e-6);
  EXPECT_NEAR(p.to_double()[1], -4.0 * std::pow(0.9, 3), 1e-6);
}

TEST(Optim, AdamWLowPrecisionGradAndBadCalls) {
  ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.f};
  Tensor p = Tensor::from_vector(kP0, {5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
  ops::adamw_step(p, Tensor::from_vector(kGrads[0], {5}, DType::f16), m, v, hp, 1);
  auto pd = p.to_double();
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(pd[i], kP0[i] - 1e-3 * (kGrads[0][i] > 0 ? 1 : -1), 1e-6);
  try {
    Tensor bad = Tensor::zeros({4});
    ops::adamw_step(p, Tensor::zeros({5}), bad, v, hp, 2);
    FAIL();
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("adamw_step"), std::string::npos);
    EXPECT_NE(msg.find("(4,)"), std::string::npos);
    EXPECT_NE(msg.find("(5,)"), std::string::npos);
  }
  Tensor pb = Tensor::zeros({5}, DType::bf16);
  EXPECT_THROW(ops::adamw_step(pb, Tensor::zeros({5}), m, v, hp, 2), DTypeError);
  EXPECT_THROW(ops::adamw_step(p, Tensor::zeros({5}), m, v, hp, 0), ValueError);
}

TEST(Optim, DecimalWideningMatchesPythonLiterals) {
  EXPECT_EQ(ops::decimal_widen(1e-3f), 0.001);
  EXPECT_EQ(ops::decimal_widen(0.9f), 0.9);
  EXPECT_EQ(ops::decimal_widen(0.999f), 0.999);
  EXPECT_EQ(ops::decimal_widen(6e-4f), 6e-4);
  ops::AdamWScalars s = ops::adamw_scalars({1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f}, 2);
  EXPECT_EQ(s.decay, static_cast<float>(1.0 - 0.001 * 0.1));
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(0.001 / (1.0 - std::pow(0.9, 2.0)))));
  EXPECT_EQ(s.bc2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 2.0))));
}

TEST(Optim, AdamWFollowsPyTorchOperationOrderBitwise) {
  // torch/optim/adamw.py (_single_tensor_adamw) transcribed line by line: Python scalars are
  // doubles, each f32 tensor op rounds once, lerp_ is vec::fmadd on CPU. Pins the order (and so
  // the last bits) that the CPU and CUDA kernels must both keep.
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  Tensor p = Tensor::from_vector(kP0, {5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
  std::vector<float> rp(kP0.begin(), kP0.end()), rm(5, 0.f), rv(5, 0.f);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g(kGrads[t - 1].begin(), kGrads[t - 1].end());
    ops::adamw_step(p, Tensor::from_vector(g, {5}), m, v, {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f}, t);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < 5; ++i) {
      rp[i] = rp[i] * static_cast<float>(1 - lr * wd);                                    // param.mul_
      rm[i] = std::fma(static_cast<float>(1 - b1), g[i] - rm[i], rm[i]);                   // exp_avg.lerp_
      rv[i] = rv[i] * static_cast<float>(b2);                                              // exp_avg_sq.mul_
      rv[i] = rv[i] + static_cast<float>(1 - b2) * g[i] * g[i];                            // .addcmul_
      const float denom = std::sqrt(rv[i]) / static_cast<float>(std::pow(bc2, 0.5)) + static_cast<float>(eps);
      rp[i] = rp[i] + static_cast<float>(-(lr / bc1)) * rm[i] / denom;                     // param.addcdiv_
    }
    auto pd = p.to_float();
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(pd[i], rp[i]) << "step " << t << " element " << i;
  }
}

TEST(Optim, SgdMomentumThreeStepsClosedForm) {
  const double lr = 0.1, mu = 0.9, wd = 0.01;
  Tensor p = Tensor::from_vector(kP0, {5}), buf = Tensor::zeros({5});
  std::vector<double> rp = kP0, rb(5, 0.0);
  for (int t = 0; t < 3; ++t) {
    ops::sgd_step(p, Tensor::from_vector(kGrads[t], {5}), buf, 0.1f, 0.9f, 0.01f, t == 0);
    for (size_t i = 0; i < 5; ++i) {
      const double g = kGrads[t][i] + wd * rp[i];
      rb[i] = t == 0 ? g : mu * rb[i] + g;
      rp[i] -= lr * rb[i];
    }
    auto pd = p.to_double(), bd = buf.to_double();
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(pd[i], rp[i], 2e-6 * std::max(1.0, std::fabs(rp[i]))) << "step " << t << " p " << i;
      EXPECT_NEAR(bd[i], rb[i], 2e-6 * std::max(1.0, std::fabs(rb[i]))) << "step " << t << " buf " << i;
    }
  }
}

TEST(Optim, SgdWithoutMomentumNeedsNoBuffer) {
  Tensor p = Tensor::from_vector(kP0, {5}), none;
  ops::sgd_step(p, Tensor::from_vector(kGrads[0], {5}, DType::bf16), none, 0.5f, 0.f, 0.f, true);
  auto pd = p.to_double();
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(pd[i], kP0[i] - 0.5 * kGrads[0][i], 1e-6);
}

TEST(Optim, SumSquaresInfNanAndScale) {
  EXPECT_EQ(ops::sum_squares(Tensor::from_vector(std::vector<float>{0.5f, -1.5f, 2.f}, {3}, DType::f16)), 6.5);
  const int64_t n = 100000;
  const double tenth = static_cast<double>(0.1f);
  EXPECT_NEAR(ops::sum_squares(Tensor::full({n}, 0.1)), n * tenth * tenth, 1e-7);  // f32 accumulation would be off by ~1e-2

  EXPECT_FALSE(ops::has_inf_nan(Tensor::ones({7})));
  EXPECT_TRUE(ops::has_inf_nan(Tensor::from_vector(std::vector<float>{1.f, INFINITY}, {2})));
  EXPECT_TRUE(ops::has_inf_nan(Tensor::from_vector(std::vector<float>{NAN, 0.f}, {2}, DType::bf16)));
  EXPECT_TRUE(ops::has_inf_nan(Tensor::from_vector(std::vector<float>{1e6f}, {1}, DType::f16)));  // overflows f16

  Tensor h = Tensor::from_vector(std::vector<float>{1.f, -3.f, 0.25f}, {3}, DType::f16);
  ops::scale_(h, 0.5);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to_double(), (std::vector<double>{0.5, -1.5, 0.125}));
  Tensor f = Tensor::from_vector(std::vector<float>{2.f, 4.f}, {2});
  ops::scale_(f, 3.0);
  EXPECT_EQ(f.to_double(), (std::vector<double>{6.0, 12.0}));
  EXPECT_THROW(ops::sum_squares(Tensor::zeros({2}, DType::i64)), DTypeError);
}

// ---- grad_stats and the in-kernel GradScale ---------------------------------------------------

namespace {
// uniform in (−amp, amp) ((0, amp) when positive), deterministic
Tensor random_grad(const Shape& s, uint64_t seed, DType dt, double amp = 1.0, bool positive = false) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (double& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;
    e = positive ? amp * u : amp * (2.0 * u - 1.0);
  }
  return Tensor::from_vector(v, s, dt);
}
}  // namespace

TEST(GradStats, ClosedFormSumsAndWeights) {
  const std::vector<float> vals{0.5f, -1.5f, 2.f};  // Σ² = 6.5, exact in every dtype
  std::vector<Tensor> g{Tensor::from_vector(vals, {3}), Tensor::from_vector(vals, {3}, DType::f16),
                        Tensor::from_vector(vals, {3}, DType::bf16)};
  ops::GradStats s = ops::grad_stats(g, {});
  EXPECT_EQ(s.sumsq, 3 * 6.5);
  EXPECT_FALSE(s.found_inf);
  EXPECT_EQ(ops::grad_stats(g, {1.0, 0.0, 2.0}).sumsq, 6.5 + 2 * 6.5);
  EXPECT_EQ(ops::grad_stats(g, {0.0, 0.0, 0.0}).sumsq, 0.0);
  EXPECT_EQ(ops::grad_stats(g, {1.0, 1.0, 1.0}, 0.5).sumsq, 3 * 6.5 / 4);  // unscaled before squaring
  const int64_t n = 100000;  // double accumulation: f32 would be off by ~1e-2
  const double tenth = static_cast<double>(0.1f);
  EXPECT_NEAR(ops::grad_stats({Tensor::full({n}, 0.1)}, {}).sumsq, n * tenth * tenth, 1e-7);
}

TEST(GradStats, EqualsThePerTensorSequenceBitForBit) {
  // the old trainer: f32 copy, scale_(1/scale), sum_squares per tensor, Σ w·s in tensor order
  std::vector<Tensor> g;
  for (int i = 0; i < 7; ++i) {
    const DType dt = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::f16 : DType::bf16;
    g.push_back(random_grad({37 * i + 5, 3}, i + 1, dt, 300));
  }
  const std::vector<double> w{1, 0, 1, 0.5, 1, 0, 1};
  for (double inv : {1.0, 1.0 / 1024, 1.0 / 3}) {
    double want = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      Tensor c = g[i].to(DType::f32).clone();
      if (inv != 1.0) ops::scale_(c, inv);
      if (w[i] != 0) want += w[i] * ops::sum_squares(c);
    }
    EXPECT_EQ(ops::grad_stats(g, w, inv).sumsq, want) << "inv_scale " << inv;
  }
}

TEST(GradStats, InfNanInEveryDtypeWhateverTheWeight) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<Tensor> g{Tensor::ones({5}, dt), Tensor::from_vector(std::vector<float>{1.f, 2.f, bad}, {3}, dt)};
      EXPECT_TRUE(ops::grad_stats(g, {1.0, 1.0}).found_inf) << dtype_name(dt) << " " << bad;
      EXPECT_TRUE(ops::grad_stats(g, {1.0, 0.0}).found_inf) << "a weight-0 copy is still applied by the optimizer";
      EXPECT_EQ(ops::grad_stats(g, {1.0, 0.0}).sumsq, 5.0);
    }
  }
  EXPECT_TRUE(ops::grad_stats({Tensor::from_vector(std::vector<float>{1e6f}, {1}, DType::f16)}, {}).found_inf);
  EXPECT_FALSE(ops::grad_stats({Tensor::from_vector(std::vector<float>{65504.f}, {1}, DType::f16)}, {}).found_inf);
  // the unscaled value is what is checked: a finite f32 that the factor overflows counts
  EXPECT_TRUE(ops::grad_stats({Tensor::from_vector(std::vector<float>{3e38f}, {1})}, {}, 4.0).found_inf);
}

TEST(GradStats, EmptyViewsAndBadCalls) {
  ops::GradStats s = ops::grad_stats({}, {});
  EXPECT_EQ(s.sumsq, 0.0);
  EXPECT_FALSE(s.found_inf);
  EXPECT_EQ(ops::grad_stats({Tensor::zeros({0}), Tensor::zeros({0, 4}, DType::bf16)}, {}).sumsq, 0.0);
  Tensor base = Tensor::from_vector(std::vector<float>{9.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {7});
  Tensor view = base.narrow(0, 1, 6).view({2, 3});  // storage offset 1
  Tensor tr = view.transpose(0, 1);                  // not contiguous
  EXPECT_EQ(ops::grad_stats({view, tr}, {}).sumsq, 2 * 91.0);
  EXPECT_THROW(ops::grad_stats({Tensor::ones({2})}, {1.0, 1.0}), ValueError);
  EXPECT_THROW(ops::grad_stats({Tensor::zeros({2}, DType::i64)}, {}), DTypeError);
  EXPECT_THROW(ops::grad_stats({Tensor::ones({2}), Tensor()}, {}), ValueError);
}

TEST(GradScale, AdamWAndSgdEqualTheSeparatePassesBitForBit) {
  // before: g32 = float(g); scale_(g32, 1/scale); scale_(g32, coef); step(g32). Now: step(g, gs).
  const Shape s{41, 7};
  for (DType gdt : {DType::f32, DType::f16, DType::bf16}) {
    for (ops::GradScale gs : {ops::GradScale{}, ops::GradScale{1.0 / 65536, 1.0}, ops::GradScale{1.0, 0.37},
                              ops::GradScale{1.0 / 3, 0.123456789}}) {
      SCOPED_TRACE(std::string(dtype_name(gdt)) + " unscale " + std::to_string(gs.unscale) + " clip " +
                   std::to_string(gs.clip));
      Tensor p0 = random_grad(s, 1, DType::f32), m0 = random_grad(s, 2, DType::f32, 0.1);
      Tensor v0 = random_grad(s, 3, DType::f32, 0.01, /*positive=*/true);
      Tensor pa = p0.clone(), ma = m0.clone(), va = v0.clone(), pb = p0.clone(), mb = m0.clone(), vb = v0.clone();
      Tensor la = Tensor::zeros(s, DType::bf16), lb = Tensor::zeros(s, DType::bf16);
      Tensor ba = m0.clone(), bb = m0.clone(), qa = p0.clone(), qb = p0.clone();
      const ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
      for (int64_t t = 1; t <= 3; ++t) {
        Tensor g = random_grad(s, 10 + t, gdt, 1000);
        Tensor g32 = g.to(DType::f32).clone();
        if (gs.unscale != 1.0) ops::scale_(g32, gs.unscale);
        if (gs.clip != 1.0) ops::scale_(g32, gs.clip);
        ops::adamw_step(pa, g32, ma, va, hp, t, la);
        ops::adamw_step(pb, g, mb, vb, hp, t, lb, gs);
        ops::sgd_step(qa, g32, ba, 0.1f, 0.9f, 0.01f, t == 1);
        ops::sgd_step(qb, g, bb, 0.1f, 0.9f, 0.01f, t == 1, gs);
      }
      EXPECT_EQ(pb.to_double(), pa.to_double());
      EXPECT_EQ(mb.to_double(), ma.to_double());
      EXPECT_EQ(vb.to_double(), va.to_double());
      EXPECT_EQ(lb.to_double(), la.to_double());
      EXPECT_EQ(qb.to_double(), qa.to_double());
      EXPECT_EQ(bb.to_double(), ba.to_double());
    }
  }
}

TEST(AdamWMulti, EqualsThePerTensorOpBitForBit) {
  // a mixed list: sizes 1..300, grad f32/f16/bf16 (some views at odd offsets, one transposed),
  // copy none/f16/bf16, weight decay on matrices only, an empty tensor; three steps with a GradScale
  const DType gdts[] = {DType::f32, DType::f16, DType::bf16};
  const DType lpdts[] = {DType::f32, DType::f16, DType::bf16};  // f32: no copy
  const Shape shapes[] = {{1}, {7}, {8, 3}, {0}, {300}, {13, 5}, {2, 2}};
  const int n = 14;
  std::vector<Tensor> pa, ma, va, la, pb, mb, vb, lb;
  for (int i = 0; i < n; ++i) {
    const Shape& s = shapes[i % 7];
    Tensor p0 = random_grad(s, 1 + i, DType::f32), m0 = random_grad(s, 50 + i, DType::f32, 0.1);
    Tensor v0 = random_grad(s, 90 + i, DType::f32, 0.01, /*positive=*/true);
    pa.push_back(p0.clone()), ma.push_back(m0.clone()), va.push_back(v0.clone());
    pb.push_back(p0.clone()), mb.push_back(m0.clone()), vb.push_back(v0.clone());
    const DType ld = lpdts[(i / 3) % 3];
    la.push_back(ld == DType::f32 ? Tensor() : Tensor::zeros(s, ld));
    lb.push_back(ld == DType::f32 ? Tensor() : Tensor::zeros(s, ld));
  }
  const ops::AdamWParams decay{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f}, plain{1e-3f, 0.9f, 0.95f, 1e-8f, 0.f};
  const ops::GradScale gs{1.0 / 1024, 0.37};
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<Tensor> g;
    for (int i = 0; i < n; ++i) {
      const Shape& s = shapes[i % 7];
      const DType gd = gdts[i % 3];
      if (i % 4 == 1) {  // a view one element into a larger buffer
        g.push_back(random_grad({shape_numel(s) + 1}, 100 * t + i, gd, 500).narrow(0, 1, shape_numel(s)).view(s));
      } else if (i == 5) {  // (13, 5) from a transposed (5, 13): not contiguous
        g.push_back(random_grad({5, 13}, 100 * t + i, gd, 500).transpose(0, 1));
      } else {
        g.push_back(random_grad(s, 100 * t + i, gd, 500));
      }
    }
    std::vector<ops::AdamWSlot> slots;
    for (int i = 0; i < n; ++i) {
      const ops::AdamWParams& hp = pa[i].dim() >= 2 ? decay : plain;
      ops::adamw_step(pa[i], g[i], ma[i], va[i], hp, t, la[i], gs);
      slots.push_back({&pb[i], &g[i], &mb[i], &vb[i], lb[i], ops::adamw_scalars(hp, t)});
    }
    ops::adamw_step_multi(slots, gs);
  }
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    EXPECT_EQ(pb[i].to_double(), pa[i].to_double());
    EXPECT_EQ(mb[i].to_double(), ma[i].to_double());
    EXPECT_EQ(vb[i].to_double(), va[i].to_double());
    if (la[i].defined()) {
      EXPECT_EQ(lb[i].to_double(), la[i].to_double());
    }
  }
  ops::adamw_step_multi({}, gs);  // nothing to do
}

TEST(AdamWMulti, BadSlotsNameTheSlotAndChangeNothing) {
  Tensor p = Tensor::ones({5}), g = Tensor::ones({5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
  Tensor p2 = Tensor::ones({2, 3}), g2 = Tensor::ones({2, 3}), m2 = Tensor::zeros({2, 3}), v2 = Tensor::zeros({2, 3});
  const ops::AdamWScalars s = ops::adamw_scalars({1e-3f, 0.9f, 0.95f, 1e-8f, 0.f}, 1);
  auto expect_slot1 = [&](auto make_bad, const char* what) {
    SCOPED_TRACE(what);
    std::vector<ops::AdamWSlot> slots{{&p, &g, &m, &v, Tensor(), s}, {&p2, &g2, &m2, &v2, Tensor(), s}};
    make_bad(slots[1]);
    try {
      ops::adamw_step_multi(slots);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("adamw_step_multi: slot 1"), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.to_double(), std::vector<double>(5, 1.0)) << "slot 0 updated before the check of slot 1";
  };
  Tensor g_wrong = Tensor::ones({3, 2}), m16 = Tensor::zeros({2, 3}, DType::f16);
  Tensor gi = Tensor::zeros({2, 3}, DType::i64);
  Tensor big = Tensor::zeros({2, 6}), lp32 = Tensor::zeros({2, 3});
  Tensor p_nc = big.narrow(1, 0, 3);  // (2, 3) view, not contiguous
  expect_slot1([&](ops::AdamWSlot& sl) { sl.grad = &g_wrong; }, "grad shape");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.m = &m16; }, "m dtype");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.grad = &gi; }, "grad dtype");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.param = &p_nc; }, "param not contiguous");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.param_lp = lp32; }, "lp dtype");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.param_lp = Tensor::zeros({6}, DType::bf16); }, "lp shape");
  expect_slot1([&](ops::AdamWSlot& sl) { sl.v = nullptr; }, "null");
  std::vector<ops::AdamWSlot> bad{{&p, &g, &m, &v, Tensor(), s}, {&p2, &g_wrong, &m2, &v2, Tensor(), s}};
  EXPECT_THROW(ops::adamw_step_multi(bad), ShapeError);
  bad[1] = {&p2, &g2, &m16, &v2, Tensor(), s};
  EXPECT_THROW(ops::adamw_step_multi(bad), DTypeError);
  bad[1] = {&p_nc, &g2, &m2, &v2, Tensor(), s};
  EXPECT_THROW(ops::adamw_step_multi(bad), ValueError);
}

TEST(AdamWMulti, SnapshotBlocksHoldWhatTheStepLeft) {
  // slot 0: 7 elements (stride 8: one float of padding after each part), slot 1: (2, 4) with a
  // block longer than it needs, slot 2: no block. Every block starts as a sentinel; after the
  // step it holds [p | m | v] bit for bit, the padding and the tail still the sentinel.
  const float kSentinel = -12345.f;
  const Shape shapes[] = {{7}, {2, 4}, {3}};
  std::vector<Tensor> p, m, v, g, block;
  for (int i = 0; i < 3; ++i) {
    p.push_back(random_grad(shapes[i], 1 + i, DType::f32));
    m.push_back(random_grad(shapes[i], 10 + i, DType::f32, 0.1));
    v.push_back(random_grad(shapes[i], 20 + i, DType::f32, 0.01, true));
    g.push_back(random_grad(shapes[i], 30 + i, DType::bf16));
  }
  EXPECT_EQ(ops::adamw_snapshot_stride(7), 8);
  EXPECT_EQ(ops::adamw_snapshot_floats(8), 24);
  block.push_back(Tensor::full({24}, kSentinel));
  block.push_back(Tensor::full({30}, kSentinel));
  const ops::AdamWScalars s = ops::adamw_scalars({1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}, 1);
  auto slots_of = [&](std::vector<Tensor>& pp, std::vector<Tensor>& mm, std::vector<Tensor>& vv) {
    return std::vector<ops::AdamWSlot>{{&pp[0], &g[0], &mm[0], &vv[0], Tensor(), s, block[0]},
                                       {&pp[1], &g[1], &mm[1], &vv[1], Tensor(), s, block[1]},
                                       {&pp[2], &g[2], &mm[2], &vv[2], Tensor(), s, Tensor()}};
  };
  auto part = [&](int i, int k) {  // block i's copy of p (k 0), m (1) or v (2)
    const int64_t n = shape_numel(shapes[i]), stride = ops::adamw_snapshot_stride(n);
    return block[i].narrow(0, k * stride, n).to_double();
  };
  // the step without blocks, for reference
  std::vector<Tensor> pr, mr, vr;
  for (int i = 0; i < 3; ++i) pr.push_back(p[i].clone()), mr.push_back(m[i].clone()), vr.push_back(v[i].clone());
  std::vector<ops::AdamWSlot> ref = slots_of(pr, mr, vr);
  for (auto& sl : ref) sl.snapshot = Tensor();
  ops::adamw_step_multi(ref);
  std::vector<ops::AdamWSlot> slots = slots_of(p, m, v);
  ops::adamw_step_multi(slots);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("slot " + std::to_string(i));
    EXPECT_EQ(p[i].to_double(), pr[i].to_double());  // the update is the same with a block
    EXPECT_NE(part(i, 0), random_grad(shapes[i], 1 + i, DType::f32).to_double()) << "the params moved";
    EXPECT_EQ(part(i, 0), p[i].reshape({-1}).to_double());
    EXPECT_EQ(part(i, 1), m[i].reshape({-1}).to_double());
    EXPECT_EQ(part(i, 2), v[i].reshape({-1}).to_double());
  }
  for (int k = 0; k < 3; ++k) EXPECT_EQ(block[0].to_double()[8 * k + 7], kSentinel) << "padding after part " << k;
  for (int64_t j = 24; j < 30; ++j) EXPECT_EQ(block[1].to_double()[j], kSentinel) << "tail " << j;

  // a block one float short is refused, naming the slot, before anything changes
  std::vector<ops::AdamWSlot> bad = slots_of(p, m, v);
  bad[1].snapshot = Tensor::zeros({23});
  const std::vector<double> before = p[0].to_double();
  try {
    ops::adamw_step_multi(bad);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("slot 1: snapshot"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p[0].to_double(), before);
  bad[1].snapshot = Tensor::zeros({24}, DType::f16);
  EXPECT_THROW(ops::adamw_step_multi(bad), ValueError);
}

TEST(AdamWMulti, TheStepStateSaysWhenTheBlocksAreWritten) {
  // adamw_step_multi_state (the trainer's step): the blocks are written only when the state's
  // `snapshot` is set — then also when the step skips (the state as it was, unchanged)
  const int64_t n = 5;
  Tensor p = random_grad({n}, 1, DType::f32), m = random_grad({n}, 2, DType::f32, 0.1);
  Tensor v = random_grad({n}, 3, DType::f32, 0.01, true), g = random_grad({n}, 4, DType::f16);
  Tensor block = Tensor::full({ops::adamw_snapshot_floats(n)}, 7.f);
  ops::DeviceStepState init;
  init.with_wd = init.no_wd = ops::adamw_scalars({1e-2f, 0.9f, 0.95f, 1e-8f, 0.f}, 1);
  auto run = [&](bool snapshot, bool skip) {
    ops::DeviceStepState st = init;
    st.snapshot = snapshot ? 1 : 0;
    st.skip = skip ? 1 : 0;
    Tensor state = ops::step_state_tensor(st, Device::cpu);
    std::vector<ops::AdamWSlot> slots{{&p, &g, &m, &v, Tensor(), {}, block}};
    ops::adamw_step_multi_state(slots, {false}, state);
  };
  const int64_t stride = ops::adamw_snapshot_stride(n);
  auto copies = [&] {
    return std::vector<std::vector<double>>{block.narrow(0, 0, n).to_double(), block.narrow(0, stride, n).to_double(),
                                            block.narrow(0, 2 * stride, n).to_double()};
  };
  auto state_now = [&] { return std::vector<std::vector<double>>{p.to_double(), m.to_double(), v.to_double()}; };
  const std::vector<double> untouched(static_cast<size_t>(n), 7.0);
  const auto s0 = state_now();
  run(/*snapshot=*/false, /*skip=*/false);
  EXPECT_NE(state_now(), s0) << "the step updated";
  EXPECT_EQ(copies()[0], untouched) << "no snapshot asked: the block stays";
  const auto s1 = state_now();
  run(/*snapshot=*/true, /*skip=*/true);
  EXPECT_EQ(state_now(), s1) << "a skipped step changes nothing";
  EXPECT_EQ(copies(), s1) << "a skipped step's snapshot is the state as it was";
  run(/*snapshot=*/true, /*skip=*/false);
  EXPECT_NE(state_now(), s1);
  EXPECT_EQ(copies(), state_now());
}
