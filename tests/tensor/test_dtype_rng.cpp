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

// Keyed fills: element j of the full tensor takes counter j of the stream keyed by (seed, name),
// so the numbers do not depend on what was filled before, and a shard (an ElementMap) holds
// exactly its elements of the full tensor.
TEST(KeyedFill, ValuesDependOnlyOnSeedNameAndIndex) {
  const uint64_t key = stream_key(5, "h.0.attn.c_attn.weight");
  Tensor full = Tensor::empty({6, 12});
  fill_normal_keyed(full, key, 0.f, 0.02f, ElementMap::whole(72));
  auto fv = full.to_double();
  for (int64_t j : {0, 17, 71}) EXPECT_EQ(fv[j], static_cast<float>(0.02f * philox_normal(key, j)));
  // the same call again, or after other draws: the same numbers (no hidden state)
  Tensor other = Tensor::empty({100}), again = Tensor::empty({6, 12});
  fill_normal_keyed(other, stream_key(5, "wpe"), 0.f, 1.f, ElementMap::whole(100));
  fill_normal_keyed(again, key, 0.f, 0.02f, ElementMap::whole(72));
  EXPECT_EQ(again.to_double(), fv);
  // another name or another seed: another stream
  Tensor n2 = Tensor::empty({6, 12}), s2 = Tensor::empty({6, 12});
  fill_normal_keyed(n2, stream_key(5, "h.0.attn.c_attn.bias"), 0.f, 0.02f, ElementMap::whole(72));
  fill_normal_keyed(s2, stream_key(6, "h.0.attn.c_attn.weight"), 0.f, 0.02f, ElementMap::whole(72));
  EXPECT_NE(n2.to_double()[0], fv[0]);
  EXPECT_NE(s2.to_double()[0], fv[0]);
  EXPECT_NE(stream_key(5, "ab"), stream_key(5, "ba"));
}

TEST(KeyedFill, AShardDrawsItsSliceOfTheFullTensor) {
  const uint64_t key = stream_key(9, "w");
  Tensor full = Tensor::empty({4, 6});  // (outer 4, full 6, inner 1): columns
  fill_normal_keyed(full, key, 1.f, 2.f, ElementMap::whole(24));
  // columns {1, 2} and {4}, then one padding column: a local (4, 4)
  ElementMap m;
  m.outer = 4, m.local = 4, m.inner = 1, m.full = 6, m.ranges = 2;
  m.start[0] = 1, m.length[0] = 2, m.start[1] = 4, m.length[1] = 1;
  Tensor shard = Tensor::empty({4, 4});
  fill_normal_keyed(shard, key, 1.f, 2.f, m);
  auto f = full.to_double(), s = shard.to_double();
  const int cols[3] = {1, 2, 4};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(s[r * 4 + c], f[r * 6 + cols[c]]) << r << "," << c;
    EXPECT_EQ(s[r * 4 + 3], 0.0) << "padding is zero";
  }
  // rows of a (6, 3) tensor: outer 1, inner 3
  ElementMap rows;
  rows.local = 2, rows.inner = 3, rows.full = 6, rows.ranges = 1, rows.start[0] = 3, rows.length[0] = 2;
  Tensor r = Tensor::empty({2, 3}, DType::bf16);
  fill_normal_keyed(r, key, 1.f, 2.f, rows);
  auto rv = r.to_double();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(rv[i], static_cast<double>(to_f32(to_bf16(static_cast<float>(f[9 + i])))));
  ElementMap wrong = ElementMap::whole(5);
  EXPECT_THROW(fill_normal_keyed(r, key, 0.f, 1.f, wrong), ShapeError);
}
