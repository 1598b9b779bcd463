// CPU dropout: one Philox draw per element (lane 0 of block offset + i), compared with p.
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
  for (int64_t i = 0; i < n; ++i)
    py[i] = philox_uniform(seed, offset + static_cast<uint64_t>(i)) < p ? 0.f : px[i] * scale;
  out.store();
}

}  // namespace st::ops::cpu
