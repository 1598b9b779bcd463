// Op cases: softmax and log-softmax over the last dim, a non-tile row length (C = 257) too.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/softmax.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsSoftmax, Softmax) {
  check_op({.name = "softmax (2,257)",
            .shapes = {{2, 257}},
            .op = [](auto& x) { return ops::softmax(x[0]); },
            .ref = [](auto& x) { return ref::softmax(x[0], 257, false); },
            .lo = -3.f,
            .hi = 3.f,
            .atol = 1e-7});
  check_op({.name = "softmax (3,4,5)",
            .shapes = {{3, 4, 5}},
            .op = [](auto& x) { return ops::softmax(x[0]); },
            .ref = [](auto& x) { return ref::softmax(x[0], 5, false); }});
}

TEST(OpsSoftmax, LogSoftmax) {
  check_op({.name = "log_softmax (2,257)",
            .shapes = {{2, 257}},
            .op = [](auto& x) { return ops::log_softmax(x[0]); },
            .ref = [](auto& x) { return ref::softmax(x[0], 257, true); },
            .lo = -3.f,
            .hi = 3.f});
  check_op({.name = "log_softmax (4,3)",
            .shapes = {{4, 3}},
            .op = [](auto& x) { return ops::log_softmax(x[0]); },
            .ref = [](auto& x) { return ref::softmax(x[0], 3, true); }});
}

TEST(OpsSoftmax, LargeLogitsDoNotOverflow) {
  Tensor x = Tensor::from_vector(std::vector<float>{1000.f, 1001.f, 999.f}, {1, 3});
  auto y = ops::softmax(x).to_double();
  const double e = std::exp(1.0), s = 1 + e + 1 / e;
  EXPECT_NEAR(y[0], 1 / s, 1e-6);
  EXPECT_NEAR(y[1], e / s, 1e-6);
  auto l = ops::log_softmax(x).to_double();
  EXPECT_NEAR(l[2], -1 - std::log(s), 1e-5);
}
