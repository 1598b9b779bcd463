// Op cases: elementwise with broadcasting, reductions, matmul (all transposes, batched), linear.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/mean.h"
#include "ops/reduce.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsBasic, AddBroadcast) {
  check_op({.name = "add (2,3,4)+(3,1)",
            .shapes = {{2, 3, 4}, {3, 1}},
            .op = [](auto& x) { return ops::add(x[0], x[1]); },
            .ref = [](auto& x) { return ref::binary({2, 3, 4}, x[0], {3, 1}, x[1], [](double a, double b) { return a + b; }); }});
}

TEST(OpsBasic, SubBroadcast) {
  check_op({.name = "sub (4,)-(2,4)",
            .shapes = {{4}, {2, 4}},
            .op = [](auto& x) { return ops::sub(x[0], x[1]); },
            .ref = [](auto& x) { return ref::binary({4}, x[0], {2, 4}, x[1], [](double a, double b) { return a - b; }); }});
}

TEST(OpsBasic, MulBroadcast) {
  check_op({.name = "mul (2,1,3)*(4,3)",
            .shapes = {{2, 1, 3}, {4, 3}},
            .op = [](auto& x) { return ops::mul(x[0], x[1]); },
            .ref = [](auto& x) { return ref::binary({2, 1, 3}, x[0], {4, 3}, x[1], [](double a, double b) { return a * b; }); }});
}

TEST(OpsBasic, DivBroadcast) {
  check_op({.name = "div (3,4)/(4,)",
            .shapes = {{3, 4}, {4}},
            .op = [](auto& x) { return ops::div(x[0], x[1]); },
            .ref = [](auto& x) { return ref::binary({3, 4}, x[0], {4}, x[1], [](double a, double b) { return a / b; }); },
            .lo = 0.5f,
            .hi = 2.0f});
}

TEST(OpsBasic, Scale) {
  check_op({.name = "scale",
            .shapes = {{5, 3}},
            .op = [](auto& x) { return ops::scale(x[0], -2.5); },
            .ref = [](auto& x) {
              std::vector<double> y = x[0];
              for (auto& v : y) v *= -2.5;
              return y;
            }});
}

TEST(OpsBasic, SumAndMeanOverDims) {
  check_op({.name = "sum dims {0,2} (3,4,5)",
            .shapes = {{3, 4, 5}},
            .op = [](auto& x) { return ops::sum(x[0], {0, 2}); },
            .ref = [](auto& x) { return ref::reduce({3, 4, 5}, x[0], {0, 2}, false); },
            .f16_tol = 2e-3});
  check_op({.name = "mean dim -1 keepdim (2,3,4)",
            .shapes = {{2, 3, 4}},
            .op = [](auto& x) { return ops::mean(x[0], {-1}, true); },
            .ref = [](auto& x) { return ref::reduce({2, 3, 4}, x[0], {2}, true); }});
  check_op({.name = "sum all",
            .shapes = {{3, 7}},
            .op = [](auto& x) { return ops::sum(x[0]); },
            .ref = [](auto& x) { return ref::reduce({3, 7}, x[0], {0, 1}, false); }});
}

TEST(OpsBasic, ArgmaxTakesTheFirstLargestAndSkipsNaN) {
  const float nan = std::nanf("");
  // (4, 5): a plain maximum, a tie (the first wins), NaN before and after the maximum, all NaN (0)
  Tensor x = Tensor::from_vector(std::vector<float>{1, 7, 3, 7, -1,  2, 2, 2, 2, 2,  nan, -3, -2, nan, -9,
                                                    nan, nan, nan, nan, nan},
                                 {4, 5});
  Tensor a = ops::argmax(x);
  ASSERT_EQ(a.shape(), (Shape{4}));
  ASSERT_EQ(a.dtype(), DType::i64);
  const int64_t* p = a.data<int64_t>();
  EXPECT_EQ(p[0], 1);
  EXPECT_EQ(p[1], 0);
  EXPECT_EQ(p[2], 2);
  EXPECT_EQ(p[3], 0);
  // leading dims are kept, the last is reduced: (2, 2, 5) → (2, 2), the rows above in order
  Tensor b = ops::argmax(x.reshape({2, 2, 5}));
  ASSERT_EQ(b.shape(), (Shape{2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.contiguous().data<int64_t>()[i], p[i]);
  EXPECT_EQ(ops::argmax(x.to(DType::bf16)).data<int64_t>()[0], 1);  // any float dtype
}

TEST(OpsBasic, MatmulAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{5, 3} : Shape{3, 5}, sb = tb ? Shape{4, 5} : Shape{5, 4};
      check_op({.name = std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"),
                .shapes = {sa, sb},
                .op = [ta, tb](auto& x) { return ops::matmul(x[0], x[1], ta, tb); },
                .ref = [=](auto& x) { return ref::matmul(x[0], x[1], 1, 3, 4, 5, ta, tb, false); }});
    }
}

TEST(OpsBasic, BatchedMatmul) {
  check_op({.name = "bmm (2,3,4,5)x(2,3,5,2)ᵀ",
            .shapes = {{2, 3, 4, 5}, {2, 3, 2, 5}},
            .op = [](auto& x) { return ops::matmul(x[0], x[1], false, true); },
            .ref = [](auto& x) { return ref::matmul(x[0], x[1], 6, 4, 2, 5, false, true, false); }});
  check_op({.name = "matmul shared weight (2,3,4)x(4,6)",
            .shapes = {{2, 3, 4}, {4, 6}},
            .op = [](auto& x) { return ops::matmul(x[0], x[1]); },
            .ref = [](auto& x) { return ref::matmul(x[0], x[1], 2, 3, 6, 4, false, false, true); }});
}

TEST(OpsBasic, Linear) {
  check_op({.name = "linear (2,3,4)·(4,5)+b",
            .shapes = {{2, 3, 4}, {4, 5}, {5}},
            .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); },
            .ref = [](auto& x) {
              auto y = ref::matmul(x[0], x[1], 1, 6, 5, 4, false, false, false);
              for (size_t i = 0; i < y.size(); ++i) y[i] += x[2][i % 5];
              return y;
            }});
}

TEST(OpsBasic, BadCallsNameTheOpAndShapes) {
  Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({4, 5});
  try {
    ops::matmul(a, b);
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos);
    EXPECT_NE(m.find("(2, 3)"), std::string::npos);
    EXPECT_NE(m.find("(4, 5)"), std::string::npos);
  }
  try {
    ops::add(a, Tensor::ones({2, 3}, DType::bf16));
    FAIL();
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos);
    EXPECT_NE(m.find("bf16"), std::string::npos);
  }
  EXPECT_THROW(ops::add(a, Tensor::ones({3, 2})), ShapeError);
  EXPECT_THROW(ops::linear(a, Tensor::ones({2, 2})), ShapeError);
  if (!cuda::available()) {
    EXPECT_THROW(ops::add(a, Tensor::ones({2, 3}, DType::f32, Device::cuda)), DeviceError);
  }
}
