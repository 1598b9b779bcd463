// The FP8 storage types (tensor/dtype.h): every code of both formats decoded against the formats'
// definitions and re-encoded, f32 → fp8 against an independent nearest-even search
// (tests/support/fp8_reference.h) over a dense sweep of f32 (every bf16 and f16 value among them,
// and every midpoint between two fp8 values with its f32 neighbours), the saturation, the
// subnormals and the ties, and the tensor core's casts (from_vector, to, to_double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/tensor.h"
#include "tests/support/fp8_reference.h"

using namespace st;
using st::test::Fp8Ref;

namespace {

uint8_t enc(bool e4m3, float f) { return e4m3 ? f32_to_e4m3_bits(f) : f32_to_e5m2_bits(f); }
float dec(bool e4m3, uint8_t b) { return e4m3 ? e4m3_bits_to_f32(b) : e5m2_bits_to_f32(b); }
float f(uint32_t u) { return bits_f32(u); }

// The f32 inputs the comparison sweeps: every 4099th bit pattern (both signs, all exponents), every
// bf16 and every f16 value, and for each pair of adjacent fp8 values their midpoint with its 4
// f32 neighbours on each side (ties and near-ties), and the same around each value.
std::vector<float> sweep(const Fp8Ref& ref) {
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) xs.push_back(f(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    xs.push_back(bf16_bits_to_f32(static_cast<uint16_t>(h)));
    xs.push_back(f16_bits_to_f32(static_cast<uint16_t>(h)));
  }
  std::vector<double> pts(ref.value);
  for (size_t i = 0; i + 1 < ref.value.size(); ++i) pts.push_back((ref.value[i] + ref.value[i + 1]) / 2);
  pts.push_back(ref.max() * (1 + std::ldexp(1.0, -ref.mant - 1)));  // max + half an ulp
  for (double p : pts) {
    const float c = static_cast<float>(p);  // exact: at most 5 significant bits
    for (int k = -4; k <= 4; ++k) {
      const uint32_t u = f32_bits(c) + static_cast<uint32_t>(k);
      if (c == 0.f && k < 0) continue;
      xs.push_back(f(u));
      xs.push_back(-f(u));
    }
  }
  return xs;
}

}  // namespace

class Fp8Format : public ::testing::TestWithParam<bool> {};  // true: e4m3, false: e5m2

TEST_P(Fp8Format, EveryCodeDecodesToItsDefinitionAndReencodes) {
  const bool e4m3 = GetParam();
  const Fp8Ref ref(e4m3);
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = dec(e4m3, code);
    const double want = ref.decode(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      EXPECT_EQ(enc(e4m3, v), 0x7f) << "a NaN encodes to the canonical NaN, code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), want) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code " << c;  // −0 included
    if (std::isinf(v)) {  // e5m2 ±inf: saturating, they encode to ±max
      EXPECT_EQ(enc(e4m3, v), (c & 0x80) | 0x7b) << "code " << c;
      continue;
    }
    EXPECT_EQ(enc(e4m3, v), code) << "code " << c << " (" << v << ") does not round-trip";
  }
}

TEST_P(Fp8Format, CastEqualsTheNearestEvenSearchOnADenseSweep) {
  const bool e4m3 = GetParam();
  const Fp8Ref ref(e4m3);
  const std::vector<float> xs = sweep(ref);
  int64_t bad = 0;
  for (float x : xs) {
    const uint8_t got = enc(e4m3, x), want = ref.encode(x);
    if (got != want && bad++ < 5)
      ADD_FAILURE() << "x = " << x << " (bits " << std::hex << f32_bits(x) << "): got " << int(got) << ", want "
                    << int(want) << std::dec;
  }
  EXPECT_EQ(bad, 0) << "of " << xs.size() << " inputs";
  EXPECT_GT(xs.size(), 1000000u);
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Format, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? std::string("e4m3") : std::string("e5m2"); });

TEST(Fp8, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {448.f, 449.f, 463.99f, 464.f, 465.f, 480.f, 1e30f, inf}) {
    EXPECT_EQ(f32_to_e4m3_bits(x), 0x7e) << x;
    EXPECT_EQ(f32_to_e4m3_bits(-x), 0xfe) << -x;
  }
  for (float x : {57344.f, 60000.f, 61439.f, 61440.f, 65504.f, 1e30f, inf}) {
    EXPECT_EQ(f32_to_e5m2_bits(x), 0x7b) << x;
    EXPECT_EQ(f32_to_e5m2_bits(-x), 0xfb) << -x;
  }
  EXPECT_EQ(e4m3_bits_to_f32(0x7e), 448.f);
  EXPECT_EQ(e5m2_bits_to_f32(0x7b), 57344.f);
  for (float x : {nan, -nan}) {
    EXPECT_EQ(f32_to_e4m3_bits(x), 0x7f);
    EXPECT_EQ(f32_to_e5m2_bits(x), 0x7f);
  }
  EXPECT_TRUE(std::isnan(e4m3_bits_to_f32(0x7f)) && std::isnan(e4m3_bits_to_f32(0xff)));
  EXPECT_TRUE(std::isinf(e5m2_bits_to_f32(0x7c)) && e5m2_bits_to_f32(0xfc) < 0);
  EXPECT_TRUE(std::isnan(e5m2_bits_to_f32(0x7d)) && std::isnan(e5m2_bits_to_f32(0xfe)));
  EXPECT_EQ(f32_to_e4m3_bits(424.f), 0x7d);  // nearer 416 (0x7d) than 448
  EXPECT_EQ(f32_to_e4m3_bits(432.f), 0x7e);  // tie 416 (odd code) | 448 (even) → 448
}

TEST(Fp8, SubnormalsAndTiesToEven) {
  // e4m3: subnormal step 2^-9, smallest normal 2^-6
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(1.f, -9)), 0x01);
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(1.f, -10)), 0x00);                     // tie 0 | 2^-9 → 0
  EXPECT_EQ(f32_to_e4m3_bits(-std::ldexp(1.f, -10)), 0x80);                    // −0 keeps its sign
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(1.f, -10) * 1.0000001f), 0x01);        // just above the tie
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(3.f, -10)), 0x02);                     // tie 1 | 2 → 2
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(5.f, -10)), 0x02);                     // tie 2 | 3 → 2
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(7.f, -9)), 0x07);                      // largest subnormal
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(15.f, -10)), 0x08);                    // tie 7 | 8 → 8 (smallest normal)
  EXPECT_EQ(e4m3_bits_to_f32(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(f32_to_e4m3_bits(1.0625f), 0x38);                                  // tie 1 | 1.125 → 1
  EXPECT_EQ(f32_to_e4m3_bits(1.1875f), 0x3a);                                  // tie 1.125 | 1.25 → 1.25
  EXPECT_EQ(f32_to_e4m3_bits(std::nextafter(1.0625f, 2.f)), 0x39);
  EXPECT_EQ(f32_to_e4m3_bits(std::numeric_limits<float>::denorm_min()), 0x00);
  // e5m2: subnormal step 2^-16, smallest normal 2^-14
  EXPECT_EQ(f32_to_e5m2_bits(std::ldexp(1.f, -16)), 0x01);
  EXPECT_EQ(f32_to_e5m2_bits(std::ldexp(1.f, -17)), 0x00);                     // tie → 0
  EXPECT_EQ(f32_to_e5m2_bits(std::ldexp(3.f, -17)), 0x02);                     // tie 1 | 2 → 2
  EXPECT_EQ(f32_to_e5m2_bits(std::ldexp(7.f, -17)), 0x04);                     // tie 3 | 4 → 4 (smallest normal)
  EXPECT_EQ(e5m2_bits_to_f32(0x04), std::ldexp(1.f, -14));
  EXPECT_EQ(f32_to_e5m2_bits(1.125f), 0x3c);                                   // tie 1 | 1.25 → 1
  EXPECT_EQ(f32_to_e5m2_bits(1.375f), 0x3e);                                   // tie 1.25 | 1.5 → 1.5
}

TEST(Fp8, TensorCastsRoundOnceAndWidenExactly) {
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::f8e5m2), 1u);
  EXPECT_EQ(dtype_from_name("f8e4m3"), DType::f8e4m3);
  EXPECT_EQ(dtype_from_name("float8_e5m2"), DType::f8e5m2);
  EXPECT_STREQ(dtype_name(DType::f8e5m2), "f8e5m2");
  EXPECT_FALSE(is_floating(DType::f8e4m3));
  EXPECT_TRUE(is_fp8(DType::f8e5m2) && !is_fp8(DType::bf16));
  const std::vector<float> xs{0.f, -0.f, 1.0625f, -3.3f, 500.f, -1e9f, std::ldexp(3.f, -10), 0.1f};
  const Fp8Ref r4(true), r5(false);
  for (bool e4m3 : {true, false}) {
    const DType dt = e4m3 ? DType::f8e4m3 : DType::f8e5m2;
    const Fp8Ref& ref = e4m3 ? r4 : r5;
    Tensor x32 = Tensor::from_vector(xs, {2, 4});
    Tensor a = x32.to(dt), b = Tensor::from_vector(xs, {2, 4}, dt), c = x32.to(DType::bf16).to(dt);
    EXPECT_EQ(a.nbytes(), 8u);
    const std::vector<double> va = a.to_double(), vb = b.to_double(), vc = c.to_double();
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(va[i], ref.decode(ref.encode(xs[i]))) << i;
      EXPECT_EQ(vb[i], va[i]) << i;
      EXPECT_EQ(vc[i], ref.decode(ref.encode(to_f32(to_bf16(xs[i]))))) << i;
    }
    // fp8 → f32 / bf16 / f16 are exact
    Tensor back = a.to(DType::f32);
    const std::vector<double> vf = back.to_double(), vh = a.to(DType::f16).to_double(), vbf = a.to(DType::bf16).to_double();
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(vf[i], va[i]);
      EXPECT_EQ(vh[i], va[i]);
      EXPECT_EQ(vbf[i], va[i]);
    }
    EXPECT_THROW(a.requires_grad_(), DTypeError);
  }
}
