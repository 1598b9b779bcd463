// CPU dropout: element i compared with philox_uniform_lane(seed, offset + i), one Philox block
// per four elements.
#include <cmath>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/dropout.h"
#include "tensor/philox.h"

namespace st::ops::cpu {

void dropout_fwd(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  Tensor x32 = as_f32(x);
  F32Out out(y);
  const float* px = x32.data<float>();
  float* py = out.data();
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const int64_t n = x.numel();
  // element i ↦ stream position j = offset + i: lane j mod 4 of Philox block j / 4
  // (philox_uniform_lane), one block evaluated per four elements
  for (int64_t i = 0; i < n;) {
    const uint64_t j = offset + static_cast<uint64_t>(i);
    const PhiloxBlock r = philox4x32_10(seed, j >> 2);
    for (uint64_t l = j & 3; l < 4 && i < n; ++l, ++i) {
      const float u = static_cast<float>(r.x[l] >> 8) * (1.0f / 16777216.0f);
      py[i] = u < p ? 0.f : px[i] * scale;
    }
  }
  out.store();
}

}  // namespace st::ops::cpu
