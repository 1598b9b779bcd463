// Op cases: causal attention (B, H, T, D) against a naive double reference, gradients of q, k, v.
#include <gtest/gtest.h>

#include "ops/attention.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsAttention, Small) {
  check_op({.name = "causal_attention (2,2,5,4)",
            .shapes = {{2, 2, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}},
            .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); },
            .ref = [](auto& x) { return ref::causal_attention(x[0], x[1], x[2], 4, 5, 4); },
            .lo = -2.f,
            .hi = 2.f});
}

TEST(OpsAttention, OddSizes) {
  check_op({.name = "causal_attention (1,3,7,3)",
            .shapes = {{1, 3, 7, 3}, {1, 3, 7, 3}, {1, 3, 7, 3}},
            .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); },
            .ref = [](auto& x) { return ref::causal_attention(x[0], x[1], x[2], 3, 7, 3); }});
}

TEST(OpsAttention, FirstQuerySeesOnlyTheFirstKey) {
  Tensor q = Tensor::ones({1, 1, 3, 2}), k = Tensor::ones({1, 1, 3, 2});
  Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {1, 1, 3, 2});
  auto y = ops::causal_attention(q, k, v).to_double();
  // equal scores: row t averages v over s ≤ t
  std::vector<double> expect = {1, 2, 2, 3, 3, 4};
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expect[i], 1e-6);
}

TEST(OpsAttention, BadCallsNameTheOpAndShapes) {
  try {
    ops::causal_attention(Tensor::ones({1, 2, 3, 4}), Tensor::ones({1, 2, 3, 5}), Tensor::ones({1, 2, 3, 4}));
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("causal_attention"), std::string::npos);
    EXPECT_NE(m.find("(1, 2, 3, 4)"), std::string::npos);
    EXPECT_NE(m.find("(1, 2, 3, 5)"), std::string::npos);
  }
  EXPECT_THROW(ops::causal_attention(Tensor::ones({1, 2, 3, 4}), Tensor::ones({1, 2, 3, 4}, DType::f16),
                                     Tensor::ones({1, 2, 3, 4})),
               DTypeError);
}
