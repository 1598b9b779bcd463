// Op case: the fused-MLP op mlp_gelu (x · w1 + b1 → gelu_tanh → · w2 + b2) against a double
// reference, gradients of all five inputs by finite differences; shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/mlp.h"
#include "tests/ops/harness.h"

using namespace st;
using namespace st::test;

namespace {

// x (M, C), w1 (C, F), b1 (F), w2 (F, N), b2 (N) flattened → y (M, N) in double
std::vector<double> mlp_reference(const std::vector<std::vector<double>>& in, int64_t M, int64_t C, int64_t F,
                                  int64_t N) {
  const auto &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4];
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double a = b1[f];
      for (int64_t c = 0; c < C; ++c) a += x[m * C + c] * w1[c * F + f];
      h[f] = 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
    }
    for (int64_t n = 0; n < N; ++n) {
      double a = b2[n];
      for (int64_t f = 0; f < F; ++f) a += h[f] * w2[f * N + n];
      y[m * N + n] = a;
    }
  }
  return y;
}

}  // namespace

TEST(OpsMlp, MatchesReferenceAndGradients) {
  check_op({.name = "mlp_gelu (2,3,4)→6→5",
            .shapes = {{2, 3, 4}, {4, 6}, {6}, {6, 5}, {5}},
            .op = [](auto& x) { return ops::mlp_gelu(x[0], x[1], x[2], x[3], x[4]); },
            .ref = [](auto& x) { return mlp_reference(x, 6, 4, 6, 5); },
            .grad = {},
            .lo = -1.5f,
            .hi = 1.5f});
}

TEST(OpsMlp, BadShapesNameTheOp) {
  try {
    ops::mlp_gelu(Tensor::ones({2, 4}), Tensor::ones({4, 6}), Tensor::ones({5}), Tensor::ones({6, 3}),
                  Tensor::ones({3}));
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp_gelu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("b1 (5,)"), std::string::npos) << e.what();
  }
}
