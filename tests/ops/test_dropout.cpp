// Dropout: the mask is a pure function of (seed, offset) (checked against the Philox reference,
// forward and gradient), the generator advances by numel, the keep fraction is 1 − p within a
// binomial bound, and eval / p = 0 are the identity.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/dropout.h"
#include "ops/reduce.h"
#include "tensor/philox.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

TEST(OpsDropout, MatchesPhiloxReference) {
  // the op builds its generator from (seed, offset) on every call, so every run of the harness
  // (f32, f16, bf16) draws the same mask; the gradient is mask·scale
  check_op({.name = "dropout p=0.3 (4,33)",
            .shapes = {{4, 33}},
            .op = [](auto& x) {
              Generator g(1234, 77);
              return ops::dropout(x[0], 0.3f, g, true);
            },
            .ref = [](auto& x) { return ref::dropout(x[0], static_cast<double>(0.3f), 1234, 77); }});
}

TEST(OpsDropout, ReproducibleFromSeedAndOffset) {
  Tensor x = Tensor::ones({1000});
  Generator a(9, 100), b(9, 100), c(9, 0);
  auto ya = ops::dropout(x, 0.5f, a, true).to_double();
  auto yb = ops::dropout(x, 0.5f, b, true).to_double();
  auto yc = ops::dropout(x, 0.5f, c, true).to_double();
  EXPECT_EQ(ya, yb);
  EXPECT_NE(ya, yc);
  EXPECT_EQ(a.offset(), 1100u);  // advanced by numel
  // the second draw from c continues where the first stopped: offset 1000, not 0
  auto yc2 = ops::dropout(x, 0.5f, c, true).to_double();
  for (size_t i = 0; i < yc2.size(); ++i)
    ASSERT_EQ(yc2[i], philox_uniform_lane(9, 1000 + i) < 0.5f ? 0.0 : 2.0) << i;
}

TEST(OpsDropout, KeepFractionAndScale) {
  const int64_t n = 200000;
  const float p = 0.2f;
  Tensor x = Tensor::ones({n});
  Generator g(42);
  auto y = ops::dropout(x, p, g, true).to_double();
  int64_t kept = 0;
  for (double v : y) {
    if (v != 0.0) {
      ++kept;
      ASSERT_NEAR(v, 1.0 / (1.0 - p), 1e-6);
    }
  }
  const double frac = static_cast<double>(kept) / n, sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(frac, 1.0 - p, 5 * sigma);
}

TEST(OpsDropout, GradientIsMaskTimesScale) {
  Tensor x = Tensor::empty({3, 50});
  Generator init(5);
  fill_uniform(x, init, 0.5f, 1.5f);  // nonzero, so y = 0 ⇔ dropped
  x.requires_grad_();
  Generator g(11, 3);
  Tensor y = ops::dropout(x, 0.4f, g, true);
  ops::sum(y).backward();
  auto yd = y.to_double(), gd = x.grad().to_double();
  for (size_t i = 0; i < yd.size(); ++i) {
    const bool dropped = philox_uniform_lane(11, 3 + i) < 0.4f;
    EXPECT_EQ(yd[i] == 0.0, dropped);
    EXPECT_NEAR(gd[i], dropped ? 0.0 : 1.0 / 0.6, 1e-6);
  }
}

TEST(OpsDropout, IdentityWhenEvalOrZeroAndEdgeCases) {
  Tensor x = Tensor::ones({10});
  Generator g(1, 5);
  EXPECT_TRUE(ops::dropout(x, 0.5f, g, false).same(x));
  EXPECT_TRUE(ops::dropout(x, 0.f, g, true).same(x));
  EXPECT_EQ(g.offset(), 5u);  // nothing drawn
  auto all = ops::dropout(x, 1.f, g, true).to_double();
  for (double v : all) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(ops::dropout(x, 1.5f, g, true), ValueError);
  EXPECT_THROW(ops::dropout(Tensor::zeros({2}, DType::i32), 0.5f, g, true), DTypeError);
}

// The seed held in a tensor (a graph-captured step's seed table) gives the mask of the same seed
// passed by value, at an offset that is not a multiple of four (a stream block split across calls)
TEST(OpsDropout, SeedInATensorGivesTheSameMask) {
  Tensor x = Tensor::ones({3, 37});
  const uint64_t seed = 0xDEADBEEFCAFEF00Dull;  // past 2^53: must survive the tensor exactly
  Tensor s = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(seed)}, {1});
  for (uint64_t offset : {0ull, 5ull, 1002ull}) {
    const std::vector<double> a = ops::dropout(x, 0.3f, seed, offset, true).to_double();
    const std::vector<double> b = ops::dropout(x, 0.3f, s, offset, true).to_double();
    EXPECT_EQ(a, b) << "offset " << offset;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(a[i], philox_uniform_lane(seed, offset + i) < 0.3f ? 0.0 : static_cast<double>(1.f / 0.7f)) << i;
  }
}
