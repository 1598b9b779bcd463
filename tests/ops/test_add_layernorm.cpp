// Residual add + layernorm (ops/add_layernorm.h):
//   - the harness (f32 against the double reference, gradients against central differences, f16 /
//     bf16 by relative error) on cat(r, y), so the backward gets dr and dy together; with dropout;
//     without a (r = x);
//   - bit equality with the unfused ops (add, dropout, layernorm and autograd's sum of r's two
//     gradients) in f32, bf16 and f16, forward and every gradient, with gradients on r and y,
//     on y only and on r only; the seed-in-a-tensor overload against the seed-by-value one;
//   - typed errors.
#include <gtest/gtest.h>

#include "ops/add_layernorm.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/layernorm.h"
#include "tensor/autograd.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

namespace {

// (r, y) flattened one after the other: the harness's cotangent covers both outputs
Tensor both(const ops::ResidualNorm& o) { return Tensor::cat({o.r.reshape({-1}), o.y.reshape({-1})}, 0); }

ref::Vec ref_both(const ref::Vec& r, const ref::Vec& w, const ref::Vec& b, int64_t C, double eps) {
  ref::Vec out = r, y = ref::layernorm(r, w, b, C, eps);
  out.insert(out.end(), y.begin(), y.end());
  return out;
}

ref::Vec ref_sum(const ref::Vec& x, const ref::Vec& a) {
  ref::Vec r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] + a[i];
  return r;
}

constexpr float kP = 0.3f;
constexpr uint64_t kSeed = 4242, kOffset = 1000;

}  // namespace

// Tolerances: the harness's defaults, as layernorm's own cases use them (an f32 op of C = 33..64
// terms per row is within ~1e-6 relative of the double reference; central differences with
// h = 1e-5 in double are exact to ~1e-9 here).
TEST(OpsAddLayernorm, MatchesReferenceAndFiniteDifferences) {
  check_op({.name = "add_layernorm (2,3,33)",
            .shapes = {{2, 3, 33}, {2, 3, 33}, {33}, {33}},
            .op = [](auto& x) { return both(ops::add_layernorm(x[0], x[1], x[2], x[3])); },
            .ref = [](auto& x) { return ref_both(ref_sum(x[0], x[1]), x[2], x[3], 33, 1e-5); }});
  check_op({.name = "dropout_add_layernorm p=0.3 (4,64) eps 1e-3",
            .shapes = {{4, 64}, {4, 64}, {64}, {64}},
            .op = [](auto& x) {
              return both(ops::dropout_add_layernorm(x[0], x[1], kP, kSeed, kOffset, true, x[2], x[3], 1e-3f));
            },
            .ref = [](auto& x) {
              return ref_both(ref_sum(x[0], ref::dropout(x[1], static_cast<double>(kP), kSeed, kOffset)), x[2], x[3],
                              64, 1e-3);
            }});
  check_op({.name = "add_layernorm without a (5,40)",
            .shapes = {{5, 40}, {40}, {40}},
            .op = [](auto& x) { return both(ops::add_layernorm(x[0], Tensor(), x[1], x[2])); },
            .ref = [](auto& x) { return ref_both(x[0], x[1], x[2], 40, 1e-5); }});
}

namespace {

struct Grads {
  std::vector<double> r, y, dx, da, dw, db;
};

enum class Used { both, y_only, r_only };

// One run: x, a (2, 7, C), w, b (C) from a fixed stream, in dtype dt; the outputs are consumed as
// `used` says (each through its own cotangent, plus r through a second consumer so that its
// gradient is a sum); fused or the unfused ops.
Grads run(bool fused, DType dt, int64_t C, float p, bool with_a, Used used, bool seed_tensor = false) {
  Generator g(17 + static_cast<uint64_t>(C));
  auto draw = [&](Shape s, float lo, float hi) {
    Tensor t = Tensor::empty(s);
    fill_uniform(t, g, lo, hi);
    Tensor u = t.to(dt).detach();
    u.requires_grad_();
    return u;
  };
  Tensor x = draw({2, 7, C}, -2.f, 2.f), a = draw({2, 7, C}, -1.f, 1.f), w = draw({C}, 0.5f, 1.5f),
         b = draw({C}, -0.5f, 0.5f);
  Tensor ur = Tensor::empty({2, 7, C}), uy = Tensor::empty({2, 7, C});
  fill_uniform(ur, g, -1.f, 1.f);
  fill_uniform(uy, g, -1.f, 1.f);
  ur = ur.to(dt);
  uy = uy.to(dt);
  // a non-leaf x (as in a model): its gradient reaches the leaf through a view
  Tensor xin = x.view({2, 7, C});
  Tensor r, y;
  if (fused) {
    ops::ResidualNorm o;
    if (!with_a)
      o = ops::add_layernorm(xin, Tensor(), w, b);
    else if (seed_tensor)
      o = ops::dropout_add_layernorm(xin, a, p, Tensor::from_vector(std::vector<int64_t>{int64_t(kSeed)}, {1}),
                                     kOffset, true, w, b);
    else
      o = ops::dropout_add_layernorm(xin, a, p, kSeed, kOffset, true, w, b);
    r = o.r;
    y = o.y;
  } else {
    r = with_a ? ops::add(xin, ops::dropout(a, p, kSeed, kOffset, true)) : xin;
    y = ops::layernorm(r, w, b);
  }
  // the loss: Σ ur·r + Σ uy·y as the consumers of a block would deliver them
  std::vector<Tensor> terms;
  if (used != Used::y_only) terms.push_back(ops::mul(r, ur));
  if (used != Used::r_only) terms.push_back(ops::mul(y, uy));
  Tensor loss_in = terms.size() == 2 ? Tensor::cat({terms[0], terms[1]}, 0) : terms[0];
  loss_in.backward(Tensor::ones(loss_in.shape(), dt));
  auto grad = [](const Tensor& t) { return t.grad().defined() ? t.grad().to_double() : std::vector<double>{}; };
  return {r.to_double(), y.to_double(), grad(x), grad(a), grad(w), grad(b)};
}

void expect_bit_equal(DType dt, int64_t C, float p, bool with_a, Used used) {
  const std::string what = std::string(dtype_name(dt)) + " C=" + std::to_string(C) + " p=" + std::to_string(p) +
                           (with_a ? "" : " without a") + " used " + std::to_string(static_cast<int>(used));
  Grads f = run(true, dt, C, p, with_a, used), u = run(false, dt, C, p, with_a, used);
  // EXPECT_EQ on vectors of doubles: every element's bits (no tolerance; NaN would fail too)
  EXPECT_EQ(f.r, u.r) << what;
  EXPECT_EQ(f.y, u.y) << what;
  EXPECT_EQ(f.dx, u.dx) << what;
  EXPECT_EQ(f.da, u.da) << what;
  EXPECT_EQ(f.dw, u.dw) << what;
  EXPECT_EQ(f.db, u.db) << what;
  EXPECT_FALSE(f.dx.empty()) << what;
}

}  // namespace

TEST(OpsAddLayernorm, BitIdenticalToTheUnfusedOps) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t C : {33, 64})
      for (float p : {0.f, kP})
        for (Used used : {Used::both, Used::y_only, Used::r_only}) expect_bit_equal(dt, C, p, true, used);
}

TEST(OpsAddLayernorm, WithoutABitIdenticalToLayernormPlusTheResidual) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (Used used : {Used::both, Used::y_only, Used::r_only}) expect_bit_equal(dt, 48, 0.f, false, used);
}

TEST(OpsAddLayernorm, SeedTensorDrawsTheSameMask) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Grads byval = run(true, dt, 40, kP, true, Used::both), bytensor = run(true, dt, 40, kP, true, Used::both, true);
    EXPECT_EQ(byval.r, bytensor.r);
    EXPECT_EQ(byval.da, bytensor.da);
    // and the mask is not the identity: some elements of a were dropped
    Grads none = run(true, dt, 40, 0.f, true, Used::both);
    EXPECT_NE(byval.r, none.r);
  }
}

TEST(OpsAddLayernorm, EvalOrZeroPIsThePlainAdd) {
  Tensor x = Tensor::ones({3, 8}), a = Tensor::full({3, 8}, 2.0), w = Tensor::ones({8}), b = Tensor::zeros({8});
  for (bool training : {false, true}) {
    const float p = training ? 0.f : 0.5f;
    ops::ResidualNorm o = ops::dropout_add_layernorm(x, a, p, kSeed, kOffset, training, w, b);
    EXPECT_EQ(o.r.to_double(), std::vector<double>(24, 3.0));
  }
}

TEST(OpsAddLayernorm, ErrorsAreTyped) {
  Tensor x = Tensor::ones({2, 4}), w = Tensor::ones({4}), b = Tensor::zeros({4});
  try {
    ops::add_layernorm(x, Tensor::ones({2, 5}), w, b);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add_layernorm"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 5)"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::add_layernorm(x, Tensor::ones({2, 4}, DType::bf16), w, b), DTypeError);
  EXPECT_THROW(ops::add_layernorm(x, x, Tensor::ones({5}), b), ShapeError);
  EXPECT_THROW(ops::add_layernorm(x, x, w, b, 0.f), ValueError);
  EXPECT_THROW(ops::dropout_add_layernorm(x, x, 1.5f, kSeed, 0, true, w, b), ValueError);
  EXPECT_THROW(ops::dropout_add_layernorm(x, x, 0.5f, Tensor::ones({1}), 0, true, w, b), ValueError);  // f32 seed
  EXPECT_THROW(ops::dropout_add_layernorm(x, Tensor(), 0.5f, kSeed, 0, true, w, b), ValueError);
}
