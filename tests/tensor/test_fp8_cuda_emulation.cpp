// tensor/dtype.h's FP8 casts against CUDA's host emulation of cvt.rn.satfinite and of the fp8 →
// f32 conversion (cuda_fp8.hpp's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, …), compiled for the
// host): every 257th f32 bit pattern (16.7 M inputs, both formats) and all 256 codes. Built in
// CUDA builds only (it needs the toolkit's headers, no device). SHARDTRAIN_TEST_FP8_EXHAUSTIVE=1
// runs all 2^32 f32 inputs instead (about 40 s of CPU).
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "tensor/dtype.h"

using namespace st;

TEST(Fp8CudaEmulation, CastGivesCudasByteForEveryInputOfTheSweep) {
  const char* env = std::getenv("SHARDTRAIN_TEST_FP8_EXHAUSTIVE");
  const uint64_t stride = env && std::strcmp(env, "1") == 0 ? 1 : 257;
  uint64_t bad4 = 0, bad5 = 0, n = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += stride, ++n) {
    const float f = bits_f32(static_cast<uint32_t>(u));
    const uint8_t c4 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
    const uint8_t c5 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
    if (c4 != f32_to_e4m3_bits(f) && bad4++ < 5)
      ADD_FAILURE() << "e4m3 of bits " << std::hex << u << ": CUDA " << int(c4) << ", ours " << int(f32_to_e4m3_bits(f));
    if (c5 != f32_to_e5m2_bits(f) && bad5++ < 5)
      ADD_FAILURE() << "e5m2 of bits " << std::hex << u << ": CUDA " << int(c5) << ", ours " << int(f32_to_e5m2_bits(f));
  }
  EXPECT_EQ(bad4 + bad5, 0u) << "of " << n << " inputs";
}

TEST(Fp8CudaEmulation, DecodeGivesCudasValueForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    __nv_fp8_e4m3 a;
    a.__x = static_cast<__nv_fp8_storage_t>(c);
    __nv_fp8_e5m2 e;
    e.__x = static_cast<__nv_fp8_storage_t>(c);
    const float ca = static_cast<float>(a), ce = static_cast<float>(e);
    const float oa = e4m3_bits_to_f32(static_cast<uint8_t>(c)), oe = e5m2_bits_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(ca)) {
      EXPECT_TRUE(std::isnan(oa)) << c;
    } else {
      EXPECT_EQ(f32_bits(ca), f32_bits(oa)) << c;
    }
    if (std::isnan(ce)) {
      EXPECT_TRUE(std::isnan(oe)) << c;
    } else {
      EXPECT_EQ(f32_bits(ce), f32_bits(oe)) << c;
    }
  }
}
