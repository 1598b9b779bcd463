// Helpers the FP8 tests share: seeded normal samples and a tensor's bytes (on the host), for
// inputs and bit-for-bit comparisons.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/tensor.h"

namespace st::test {

// n samples of N(0, std²) from a seeded mt19937: the same values on every machine and run
inline std::vector<float> normal(size_t n, float std, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// t's bytes, contiguous, copied to the host
inline std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu).contiguous();
  const uint8_t* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

}  // namespace st::test
