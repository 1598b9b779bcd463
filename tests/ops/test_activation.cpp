// Op cases: GELU (tanh form), ReLU and SiLU, including a non-tile length.
#include <gtest/gtest.h>

#include "ops/activation.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsActivation, Gelu) {
  check_op({.name = "gelu (3,257)",
            .shapes = {{3, 257}},
            .op = [](auto& x) { return ops::gelu(x[0]); },
            .ref = [](auto& x) { return ref::gelu(x[0]); },
            .lo = -4.f,
            .hi = 4.f});
}

TEST(OpsActivation, Relu) {
  check_op({.name = "relu (2,3,5)",
            .shapes = {{2, 3, 5}},
            .op = [](auto& x) { return ops::relu(x[0]); },
            .ref = [](auto& x) { return ref::relu(x[0]); }});
}

TEST(OpsActivation, Silu) {
  check_op({.name = "silu (3,257)",
            .shapes = {{3, 257}},
            .op = [](auto& x) { return ops::silu(x[0]); },
            .ref = [](auto& x) { return ref::silu(x[0]); },
            .lo = -6.f,
            .hi = 6.f});
}

TEST(OpsActivation, SiluKnownValues) {
  // x/(1 + e⁻ˣ) at x = 1: 0.7310585786300049; silu(−x) = silu(x) − x; far below 0 it is −0
  Tensor x = Tensor::from_vector(std::vector<float>{1.f, 0.f, -1.f, -200.f}, {4});
  auto y = ops::silu(x).to_double();
  EXPECT_NEAR(y[0], 0.7310585786300049, 1e-7);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_NEAR(y[2], 0.7310585786300049 - 1.0, 1e-7);
  EXPECT_EQ(y[3], 0.0);
}

TEST(OpsActivation, GeluKnownValues) {
  // 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) at x = 1: 0.8411919906082768
  Tensor x = Tensor::from_vector(std::vector<float>{1.f, 0.f, -1.f}, {3});
  auto y = ops::gelu(x).to_double();
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-6);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_NEAR(y[2], 0.8411919906082768 - 1.0, 1e-6);  // gelu(−x) = gelu(x) − x
}

TEST(OpsActivation, GradientOfANonContiguousInput) {
  Tensor x = Tensor::from_vector(std::vector<float>{-1.f, 2.f, 3.f, -4.f}, {2, 2}).requires_grad_();
  Tensor y = ops::relu(x.transpose(0, 1));  // (2, 2) view
  y.backward(Tensor::from_vector(std::vector<float>{10.f, 20.f, 30.f, 40.f}, {2, 2}));
  // y[i][j] = relu(x[j][i]) → dx[j][i] = dy[i][j]·[x[j][i] > 0]
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{0, 30, 20, 0}));
}
