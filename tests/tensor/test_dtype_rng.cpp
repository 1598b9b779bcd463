// f16/bf16 conversions (exhaustive round trip, RNE ties) and the Philox generator.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tensor/philox.h"
#include "tensor/rng.h"

using namespace st;

TEST(Half, EveryF16RoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16_bits(f), h) << "bits " << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3·2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7bff);  // largest finite
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);       // tie → even
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);   // tie → even (up)
  EXPECT_EQ(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    float f = bf16_bits_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16_bits(f), b);
    }
  }
}

TEST(Philox, KnownAnswer) {
  // Random123's known-answer vector for philox4x32-10 with counter 0 and key 0.
  PhiloxBlock b = philox4x32_10(0, 0);
  EXPECT_EQ(b.x[0], 0x6627e8d5u);
  EXPECT_EQ(b.x[1], 0xe169c58du);
  EXPECT_EQ(b.x[2], 0xbc57ac4cu);
  EXPECT_EQ(b.x[3], 0x9b00dbd8u);
}

TEST(Philox, DependsOnlyOnSeedAndOffset) {
  Generator g1(42), g2(42);
  Tensor a = Tensor::empty({1000}), b = Tensor::empty({600}), c = Tensor::empty({400});
  fill_uniform(a, g1);
  fill_uniform(b, g2);
  fill_uniform(c, g2);  // continues at offset 600
  auto av = a.to_double(), bv = b.to_double(), cv = c.to_double();
  for (int i = 0; i < 600; ++i) ASSERT_EQ(av[i], bv[i]);
  for (int i = 0; i < 400; ++i) ASSERT_EQ(av[600 + i], cv[i]);
  EXPECT_EQ(g1.offset(), 1000u);
}

TEST(Philox, UniformAndNormalMoments) {
  Generator g(7);
  Tensor u = Tensor::empty({200000}), n = Tensor::empty({200000});
  fill_uniform(u, g, -1.f, 3.f);
  fill_normal(n, g, 0.5f, 2.f);
  double su = 0, sn = 0, sn2 = 0;
  for (double v : u.to_double()) {
    ASSERT_GE(v, -1.0);
    ASSERT_LT(v, 3.0);
    su += v;
  }
  for (double v : n.to_double()) {
    sn += v;
    sn2 += v * v;
  }
  const double N = 200000;
  EXPECT_NEAR(su / N, 1.0, 0.01);          // mean of U(-1, 3); σ/√N ≈ 0.0026
  EXPECT_NEAR(sn / N, 0.5, 0.02);          // σ/√N ≈ 0.0045
  EXPECT_NEAR(sn2 / N - 0.25, 4.0, 0.06);  // variance 4
}
