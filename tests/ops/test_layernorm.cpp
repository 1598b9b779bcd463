// Op cases: layernorm over the last dim (C = 257 and a 3-d input), gradients of x, w and b.
#include <gtest/gtest.h>

#include "ops/layernorm.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsLayernorm, NonTileC) {
  check_op({.name = "layernorm (2,257)",
            .shapes = {{2, 257}, {257}, {257}},
            .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2]); },
            .ref = [](auto& x) { return ref::layernorm(x[0], x[1], x[2], 257, 1e-5); }});
}

TEST(OpsLayernorm, ThreeDimsAndEps) {
  check_op({.name = "layernorm (2,3,8) eps 1e-3",
            .shapes = {{2, 3, 8}, {8}, {8}},
            .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2], 1e-3f); },
            .ref = [](auto& x) { return ref::layernorm(x[0], x[1], x[2], 8, 1e-3); },
            .lo = -2.f,
            .hi = 2.f});
}

TEST(OpsLayernorm, BadShapesNameTheOp) {
  try {
    ops::layernorm(Tensor::ones({2, 4}), Tensor::ones({5}), Tensor::ones({5}));
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layernorm"), std::string::npos);
    EXPECT_NE(m.find("(2, 4)"), std::string::npos);
    EXPECT_NE(m.find("(5,)"), std::string::npos);
  }
  EXPECT_THROW(ops::layernorm(Tensor::ones({2, 4}), Tensor::ones({4}, DType::bf16), Tensor::ones({4})), DTypeError);
}
