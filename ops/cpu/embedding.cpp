// CPU embedding: row copies forward, in-order scatter-add backward.
#include <algorithm>
#include <cstring>

#include "ops/cpu/common.h"
#include "ops/cpu/f32_out.h"
#include "ops/embedding.h"

namespace st::ops::cpu {
namespace {
int64_t index_at(const Tensor& idx, int64_t n) {
  return idx.dtype() == DType::i32 ? static_cast<int64_t>(idx.data<int32_t>()[n]) : idx.data<int64_t>()[n];
}
}  // namespace

void embedding_fwd(const Tensor& weight, const Tensor& idx, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1), N = idx.numel();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = index_at(idx, n);
    if (t < 0 || t >= V)
      ST_THROW(ValueError, "embedding: index " << t << " at position " << n << " is outside [0, V = " << V
                                               << ") for weight " << weight.describe());
  }
  // out has weight's dtype: rows are copied bit for bit (no widening of the whole table)
  const size_t row = static_cast<size_t>(C) * dtype_size(weight.dtype());
  const char* pw = static_cast<const char*>(weight.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  for (int64_t n = 0; n < N; ++n) std::memcpy(po + n * row, pw + index_at(idx, n) * row, row);
}

void embedding_bwd(const Tensor& idx, const Tensor& dout, Tensor& dweight) {
  const int64_t C = dweight.size(1), N = idx.numel();
  Tensor g32 = as_f32(dout);
  F32Out o(dweight);
  const float* pg = g32.data<float>();
  float* pd = o.data();
  std::fill_n(pd, dweight.numel(), 0.f);
  for (int64_t n = 0; n < N; ++n) {
    float* row = pd + index_at(idx, n) * C;
    const float* gr = pg + n * C;
    for (int64_t c = 0; c < C; ++c) row[c] += gr[c];
  }
  o.store();
}

}  // namespace st::ops::cpu
