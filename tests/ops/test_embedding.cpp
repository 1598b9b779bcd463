// Op cases: embedding lookup with repeated indices (scatter-add backward), i32 and i64 indices.
#include <gtest/gtest.h>

#include "ops/embedding.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsEmbedding, RepeatedIndicesI64) {
  const std::vector<int64_t> idx = {2, 0, 2, 6, 2, 1};  // row 2 three times, rows 3-5 never
  Tensor t = Tensor::from_vector(idx, {2, 3});
  check_op({.name = "embedding (7,5)[(2,3)]",
            .shapes = {{7, 5}},
            .op = [t](auto& x) { return ops::embedding(x[0], t); },
            .ref = [idx](auto& x) { return ref::embedding(x[0], 5, idx); }});
}

TEST(OpsEmbedding, I32Indices) {
  const std::vector<int64_t> idx = {4, 4, 0};
  Tensor t = Tensor::from_vector(std::vector<int32_t>{4, 4, 0}, {3});
  check_op({.name = "embedding (5,9)[(3) i32]",
            .shapes = {{5, 9}},
            .op = [t](auto& x) { return ops::embedding(x[0], t); },
            .ref = [idx](auto& x) { return ref::embedding(x[0], 9, idx); }});
}

TEST(OpsEmbedding, ScatterAddClosedForm) {
  Tensor w = Tensor::zeros({3, 2}).requires_grad_();
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 1, 0}, {3});
  Tensor y = ops::embedding(w, idx);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  y.backward(Tensor::from_vector(std::vector<float>{1, 2, 10, 20, 100, 200}, {3, 2}));
  EXPECT_EQ(w.grad().to_double(), (std::vector<double>{100, 200, 11, 22, 0, 0}));
}

TEST(OpsEmbedding, OutOfRangeIndexNamesIndexAndV) {
  Tensor w = Tensor::zeros({4, 2});
  for (int64_t bad : {4, -1}) {
    try {
      ops::embedding(w, Tensor::from_vector(std::vector<int64_t>{0, bad}, {2}));
      FAIL();
    } catch (const ValueError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("embedding"), std::string::npos);
      EXPECT_NE(m.find("index " + std::to_string(bad)), std::string::npos) << m;
      EXPECT_NE(m.find("V = 4"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(ops::embedding(w, Tensor::zeros({2})), DTypeError);
}
