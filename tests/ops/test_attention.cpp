// Op cases: causal attention (B, H, T, D) against a naive double reference, gradients of q, k, v.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

namespace {

// qkv (B, T, 3·H·D) → (B, T, H·D), naive in double: the packed op's reference
std::vector<double> packed_reference(const std::vector<double>& x, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t A = H * D;
  std::vector<double> y(static_cast<size_t>(B * T * A), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return x[static_cast<size_t>(((b * T + t) * 3 + part) * A + h * D + d)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(static_cast<size_t>(t + 1));
        double mx = -1e300, z = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, t, 0, h, d) * at(b, s, 1, h, d);
          w[s] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, w[s]);
        }
        for (auto& v : w) z += (v = std::exp(v - mx));
        for (int64_t s = 0; s <= t; ++s)
          for (int64_t d = 0; d < D; ++d) y[static_cast<size_t>((b * T + t) * A + h * D + d)] += w[s] / z * at(b, s, 2, h, d);
      }
  return y;
}

}  // namespace

TEST(OpsAttention, PackedQkv) {
  check_op({.name = "causal_attention_qkv (2,6,3·2·4)",
            .shapes = {{2, 6, 24}},
            .op = [](auto& x) { return ops::causal_attention_qkv(x[0], 2); },
            .ref = [](auto& x) { return packed_reference(x[0], 2, 6, 2, 4); },
            .lo = -2.f,
            .hi = 2.f});
  check_op({.name = "causal_attention_qkv (1,5,3·3·3)",
            .shapes = {{1, 5, 27}},
            .op = [](auto& x) { return ops::causal_attention_qkv(x[0], 3); },
            .ref = [](auto& x) { return packed_reference(x[0], 1, 5, 3, 3); }});
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 10}), 2), ShapeError);  // 10 ≠ 3·2·D
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({2, 12}), 2), ShapeError);
  EXPECT_THROW(ops::causal_attention_qkv(Tensor::ones({1, 2, 12}), 0), ShapeError);
}
