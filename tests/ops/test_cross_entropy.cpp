// Op cases: cross-entropy (mean over counted targets) with ignore_index, i32 and i64 targets,
// f16/bf16 logits; the loss is an f32 scalar in every case.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cross_entropy.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsCrossEntropy, WithIgnoreIndexI64) {
  const std::vector<int64_t> t = {3, -100, 0, 6, 2, -100};  // two rows ignored
  Tensor targets = Tensor::from_vector(t, {2, 3});
  check_op({.name = "cross_entropy (2,3,7) ignore -100",
            .shapes = {{2, 3, 7}},
            .op = [targets](auto& x) { return ops::cross_entropy(x[0], targets); },
            .ref = [t](auto& x) { return ref::cross_entropy(x[0], 7, t, -100); },
            .lo = -3.f,
            .hi = 3.f});
}

TEST(OpsCrossEntropy, I32TargetsCustomIgnoreAndLongRows) {
  const std::vector<int64_t> t = {5, 0, 256, 5};  // ignore_index = 5 drops rows 0 and 3
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{5, 0, 256, 5}, {4});
  check_op({.name = "cross_entropy (4,257) i32 ignore 5",
            .shapes = {{4, 257}},
            .op = [targets](auto& x) { return ops::cross_entropy(x[0], targets, 5); },
            .ref = [t](auto& x) { return ref::cross_entropy(x[0], 257, t, 5); },
            .lo = -2.f,
            .hi = 2.f});
}

TEST(OpsCrossEntropy, ClosedFormAndDtypes) {
  // uniform logits over V classes: loss = log V whatever the targets; a gradient entry is
  // (1/V − [c = t]) / count.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor logits = Tensor::zeros({3, 4}, dt).requires_grad_();
    Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, -100, 2}, {3});
    Tensor loss = ops::cross_entropy(logits, targets);
    EXPECT_EQ(loss.dtype(), DType::f32);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_NEAR(loss.item(), std::log(4.0), 1e-6);
    loss.backward();
    EXPECT_EQ(logits.grad().dtype(), dt);
    auto g = logits.grad().to_double();
    EXPECT_NEAR(g[0], 0.125, 1e-3);
    EXPECT_NEAR(g[1], (0.25 - 1) / 2, 1e-3);
    EXPECT_EQ(g[4], 0.0);  // ignored row
    EXPECT_NEAR(g[10], (0.25 - 1) / 2, 1e-3);
  }
}

TEST(OpsCrossEntropy, AllIgnoredIsNaNAndBadTargetsThrow) {
  Tensor logits = Tensor::zeros({2, 3});
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{-100, -100}, {2})).item()));
  try {
    ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 3}, {2}));
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cross_entropy"), std::string::npos);
    EXPECT_NE(m.find("target 3"), std::string::npos);
    EXPECT_NE(m.find("V = 3"), std::string::npos);
  }
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({2})), DTypeError);           // float targets
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, {3})), ShapeError);
}
