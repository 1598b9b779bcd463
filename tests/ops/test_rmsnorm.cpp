// RMS normalisation (ops/rmsnorm.h) and the fused residual add + RMS norm (ops/add_rmsnorm.h):
//   - the harness: f32 against the double reference, gradients of x and w against central
//     differences, f16 / bf16 by relative error; add_rmsnorm on cat(r, y) so the backward gets
//     dr and dy together, with and without a;
//   - Hugging Face's order: the f32 path is LlamaRMSNorm's f32 arithmetic step by step; in f16 /
//     bf16 the op equals HF's forward written with our ops (the normalised row rounded to the
//     dtype, then multiplied by w), which differs from one rounding on these inputs;
//   - add_rmsnorm bit-identical to ops::add + ops::rmsnorm (f32, bf16, f16; forward and every
//     gradient; gradients on r and y, on y only, on r only; without a);
//   - typed errors.
// Cost: 0.05 s for the file on the 2-core dev VM (rows of ≤ 257, differences on ≤ 600 inputs).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/add_rmsnorm.h"
#include "ops/elementwise.h"
#include "ops/rmsnorm.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

// Tolerances: the harness's defaults. f32: a row of ≤ 257 terms is within ~1e-6 relative of the
// double reference (atol 1e-5, rtol 1e-4); central differences with h = 1e-5 in double are exact
// to ~1e-9, so the gradient bounds (2e-4 + 2e-3·|d|) hold f32 roundoff only. f16 / bf16 (relative
// norm error 5e-3 / 3e-2): y is rounded twice (n, then w·n), each at most half an ulp, 2⁻¹¹ /
// 2⁻⁸ relative, so ≤ 1e-3 / 8e-3 per element; gradients are held to twice that against the f32
// op on the same rounded inputs (dx and dw rounded once, dw from the rounded n).
TEST(OpsRmsnorm, MatchesReferenceAndFiniteDifferences) {
  check_op({.name = "rmsnorm (2,257)",
            .shapes = {{2, 257}, {257}},
            .op = [](auto& x) { return ops::rmsnorm(x[0], x[1]); },
            .ref = [](auto& x) { return ref::rmsnorm(x[0], x[1], 257, 1e-6); }});
  check_op({.name = "rmsnorm (2,3,8) eps 1e-3",
            .shapes = {{2, 3, 8}, {8}},
            .op = [](auto& x) { return ops::rmsnorm(x[0], x[1], 1e-3f); },
            .ref = [](auto& x) { return ref::rmsnorm(x[0], x[1], 8, 1e-3); },
            .lo = -2.f,
            .hi = 2.f});
}

namespace {

// (r, y) flattened one after the other: the harness's cotangent covers both outputs
Tensor both(const ops::ResidualNorm& o) { return Tensor::cat({o.r.reshape({-1}), o.y.reshape({-1})}, 0); }

ref::Vec ref_both(const ref::Vec& r, const ref::Vec& w, int64_t C, double eps) {
  ref::Vec out = r, y = ref::rmsnorm(r, w, C, eps);
  out.insert(out.end(), y.begin(), y.end());
  return out;
}

ref::Vec ref_sum(const ref::Vec& x, const ref::Vec& a) {
  ref::Vec r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] + a[i];
  return r;
}

Tensor draw(Generator& g, Shape s, float lo, float hi, DType dt = DType::f32) {
  Tensor t = Tensor::empty(s);
  fill_uniform(t, g, lo, hi);
  return t.to(dt);
}

}  // namespace

// Tolerances: as above (r is a sum of two inputs, exact in double, one rounding in f32).
TEST(OpsAddRmsnorm, MatchesReferenceAndFiniteDifferences) {
  check_op({.name = "add_rmsnorm (2,3,33)",
            .shapes = {{2, 3, 33}, {2, 3, 33}, {33}},
            .op = [](auto& x) { return both(ops::add_rmsnorm(x[0], x[1], x[2])); },
            .ref = [](auto& x) { return ref_both(ref_sum(x[0], x[1]), x[2], 33, 1e-6); }});
  check_op({.name = "add_rmsnorm without a (5,40) eps 1e-5",
            .shapes = {{5, 40}, {40}},
            .op = [](auto& x) { return both(ops::add_rmsnorm(x[0], Tensor(), x[1], 1e-5f)); },
            .ref = [](auto& x) { return ref_both(x[0], x[1], 40, 1e-5); }});
}

// LlamaRMSNorm.forward in f32:  variance = x.pow(2).mean(-1); x * torch.rsqrt(variance + eps);
// weight * that. Written out here op by op (the mean's sum in double: the one step whose order
// PyTorch does not fix), and the op must give its bits. Orders that are the same in exact
// arithmetic (x·w·rstd, w·x/√(var + eps)) give other bits on some of these elements, so the test
// fails if the op's order changes.
TEST(OpsRmsnorm, Float32IsHuggingFacesArithmetic) {
  Generator g(5);
  const int64_t N = 6, C = 193;
  const float eps = 1e-6f;
  Tensor x = draw(g, {N, C}, -3.f, 3.f), w = draw(g, {C}, 0.5f, 1.5f);
  const std::vector<double> y = ops::rmsnorm(x, w, eps).to_double();
  const float *px = x.data<float>(), *pw = w.data<float>();
  size_t other_order_differs = 0;
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += px[n * C + c] * px[n * C + c];  // x.pow(2): f32 squares
    const float variance = static_cast<float>(ss / C);
    const float sum = variance + eps;                  // variance + eps, in f32
    const float rs = 1.f / std::sqrt(sum);            // torch.rsqrt on the CPU: 1 / sqrt
    for (int64_t c = 0; c < C; ++c) {
      const float hs = px[n * C + c] * rs;             // hidden_states * rsqrt(...)
      const float hf = pw[c] * hs;                     // self.weight * hidden_states
      ASSERT_EQ(y[n * C + c], static_cast<double>(hf)) << "row " << n << " column " << c;
      const float alt1 = px[n * C + c] * pw[c] * rs, alt2 = pw[c] * px[n * C + c] / std::sqrt(sum);
      other_order_differs += alt1 != hf || alt2 != hf;
    }
  }
  EXPECT_GT(other_order_differs, 0u);
}

// LlamaRMSNorm.forward in f16 / bf16 with our ops: h = rmsnorm(x.float(), ones) is x·rstd in f32
// (w = 1 multiplies exactly), then weight * h.to(input_dtype). The op must give its bits; a
// single rounding of w·x·rstd (the product in f32, then the dtype) gives other bits on some of
// these elements, so the test fails if the op rounds once.
TEST(OpsRmsnorm, HalfPrecisionRoundsTheNormalisedRowBeforeTheWeight) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Generator g(7);
    const int64_t C = 160;
    Tensor x = draw(g, {4, 3, C}, -3.f, 3.f, dt), w = draw(g, {C}, 0.5f, 1.5f, dt);
    Tensor h = ops::rmsnorm(x.to(DType::f32), Tensor::ones({C}));  // (4, 3, C) f32
    const std::vector<double> hf = ops::mul(w, h.to(dt)).to_double();
    const std::vector<double> once = ops::mul(w.to(DType::f32), h).to(dt).to_double();
    EXPECT_EQ(ops::rmsnorm(x, w).to_double(), hf) << dtype_name(dt);
    EXPECT_NE(once, hf) << dtype_name(dt) << ": the data cannot tell the orders apart";
  }
}

namespace {

struct Grads {
  std::vector<double> r, y, dx, da, dw;
};

enum class Used { both, y_only, r_only };

// One run: x, a (2, 7, C), w (C) from a fixed stream, in dtype dt; the outputs consumed as `used`
// says (each through its own cotangent); fused or the unfused ops.
Grads run(bool fused, DType dt, int64_t C, bool with_a, Used used) {
  Generator g(23 + static_cast<uint64_t>(C));
  auto leaf = [&](Shape s, float lo, float hi) {
    Tensor u = draw(g, s, lo, hi, dt).detach();
    u.requires_grad_();
    return u;
  };
  Tensor x = leaf({2, 7, C}, -2.f, 2.f), a = leaf({2, 7, C}, -1.f, 1.f), w = leaf({C}, 0.5f, 1.5f);
  Tensor ur = draw(g, {2, 7, C}, -1.f, 1.f, dt), uy = draw(g, {2, 7, C}, -1.f, 1.f, dt);
  Tensor xin = x.view({2, 7, C});  // a non-leaf x (as in a model)
  Tensor r, y;
  if (fused) {
    ops::ResidualNorm o = ops::add_rmsnorm(xin, with_a ? a : Tensor(), w);
    r = o.r;
    y = o.y;
  } else {
    r = with_a ? ops::add(xin, a) : xin;
    y = ops::rmsnorm(r, w);
  }
  std::vector<Tensor> terms;  // the loss: Σ ur·r + Σ uy·y as a decoder layer's consumers deliver them
  if (used != Used::y_only) terms.push_back(ops::mul(r, ur));
  if (used != Used::r_only) terms.push_back(ops::mul(y, uy));
  Tensor loss_in = terms.size() == 2 ? Tensor::cat({terms[0], terms[1]}, 0) : terms[0];
  loss_in.backward(Tensor::ones(loss_in.shape(), dt));
  auto grad = [](const Tensor& t) { return t.grad().defined() ? t.grad().to_double() : std::vector<double>{}; };
  return {r.to_double(), y.to_double(), grad(x), grad(a), grad(w)};
}

}  // namespace

TEST(OpsAddRmsnorm, BitIdenticalToTheUnfusedOps) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t C : {33, 64})
      for (bool with_a : {true, false})
        for (Used used : {Used::both, Used::y_only, Used::r_only}) {
          const std::string what = std::string(dtype_name(dt)) + " C=" + std::to_string(C) +
                                   (with_a ? "" : " without a") + " used " + std::to_string(static_cast<int>(used));
          Grads f = run(true, dt, C, with_a, used), u = run(false, dt, C, with_a, used);
          // EXPECT_EQ on vectors of doubles: every element's bits (no tolerance; NaN would fail too)
          EXPECT_EQ(f.r, u.r) << what;
          EXPECT_EQ(f.y, u.y) << what;
          EXPECT_EQ(f.dx, u.dx) << what;
          EXPECT_EQ(f.da, u.da) << what;
          EXPECT_EQ(f.dw, u.dw) << what;
          EXPECT_FALSE(f.dx.empty()) << what;
          EXPECT_EQ(f.da.empty(), !with_a) << what;
        }
}

TEST(OpsRmsnorm, ErrorsAreTyped) {
  Tensor x = Tensor::ones({2, 4}), w = Tensor::ones({4});
  try {
    ops::rmsnorm(x, Tensor::ones({5}));
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rmsnorm"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("(5,)"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::rmsnorm(x, Tensor::ones({4}, DType::bf16)), DTypeError);
  EXPECT_THROW(ops::rmsnorm(x, w, 0.f), ValueError);
  EXPECT_THROW(ops::rmsnorm(x, Tensor()), ValueError);
  EXPECT_THROW(ops::add_rmsnorm(x, Tensor::ones({2, 5}), w), ShapeError);
  EXPECT_THROW(ops::add_rmsnorm(x, Tensor::ones({2, 4}, DType::bf16), w), DTypeError);
  EXPECT_THROW(ops::add_rmsnorm(x, x, Tensor::ones({5})), ShapeError);
  EXPECT_THROW(ops::add_rmsnorm(x, x, w, -1.f), ValueError);
}
