// Philox 4x32-10 (Salmon et al., SC'11): a counter-based generator. Every number depends only
// on (seed, counter), so the CPU and the GPU draw identical integers for the same element, in
// any order and with any thread layout. Header-only and usable from CUDA device code.
//
// Element i of a draw at `offset` uses counter block (offset + i): lane 0 gives its uniform,
// lanes 0 and 1 its normal (Box-Muller, cosine branch). Uniform floats are exact (24 bits);
// normals agree across devices to a few ulp (libm vs CUDA logf/cosf).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ST_HOST_DEVICE __host__ __device__
#else
#define ST_HOST_DEVICE
#endif

namespace st {

struct PhiloxBlock {
  uint32_t x[4];
};

ST_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// [0, 1) with 24 random bits: exactly representable, identical on every device.
ST_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(philox4x32_10(seed, counter).x[0] >> 8) * (1.0f / 16777216.0f);
}

// The dropout stream: element j takes lane j mod 4 of counter block j / 4 (24 bits, as above), so
// one Philox evaluation serves four consecutive elements.
ST_HOST_DEVICE inline float philox_uniform_lane(uint64_t seed, uint64_t j) {
  return static_cast<float>(philox4x32_10(seed, j >> 2).x[j & 3] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal via Box-Muller from lanes 0 and 1 (u1 in (0, 1] so log is finite).
ST_HOST_DEVICE inline float philox_normal(uint64_t seed, uint64_t counter) {
  PhiloxBlock b = philox4x32_10(seed, counter);
  float u1 = (static_cast<float>(b.x[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = static_cast<float>(b.x[1] >> 8) * (1.0f / 16777216.0f);
  float r = sqrtf(-2.0f * logf(u1));
  return r * cosf(6.283185307179586f * u2);
}

}  // namespace st
