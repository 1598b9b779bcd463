// The FP8 GEMM's CPU emulation (ops/fp8_matmul.h): both operands decoded to f32 exactly, one
// sgemm (fixed blocking, ops/cpu/sgemm.h) of a (M, K) by b (N, K) read transposed — every product
// of two FP8 values is exact in f32 — then the scales applied to the sums as cuBLASLt applies
// them, α = a_scale_inv · b_scale_inv, c = α · Σ + bias (the epilogue's order, in f32), rounded once
// to c's dtype.
#include <array>
#include <vector>

#include "ops/check.h"
#include "ops/cpu/sgemm.h"
#include "ops/fp8_matmul.h"

namespace st::ops::cpu {
namespace {

// q (n) fp8 → out (n) f32, exact
void decode(const Tensor& q, float* out) {
  std::array<float, 256> t;
  for (int c = 0; c < 256; ++c)
    t[c] = q.dtype() == DType::f8e4m3 ? e4m3_bits_to_f32(static_cast<uint8_t>(c)) : e5m2_bits_to_f32(static_cast<uint8_t>(c));
  const uint8_t* p = static_cast<const uint8_t*>(q.data_ptr());
  const int64_t n = q.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = t[p[i]];
}

}  // namespace

void fp8_gemm(const Tensor& a, const float* a_scale_inv, const Tensor& b, const float* b_scale_inv, Tensor& c,
              const Tensor& bias) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  std::vector<float> a32(static_cast<size_t>(M * K)), b32(static_cast<size_t>(N * K));  // (M, K), (N, K)
  decode(a, a32.data());
  decode(b, b32.data());
  Tensor c32 = c.dtype() == DType::f32 ? c : Tensor::empty(c.shape(), DType::f32);  // (M, N)
  float* pc = c32.data<float>();
  sgemm(a32.data(), false, b32.data(), true, pc, M, N, K);
  const float alpha = *a_scale_inv * *b_scale_inv;
  for (int64_t i = 0; i < M * N; ++i) pc[i] = alpha * pc[i];
  if (bias.defined()) {
    // (N), exact: bf16 / f16 / f32 → f32; a conversion, not a host read of a device value (to_float
    // is one, which a graph step's rehearsal refuses: tests/runtime/train/test_fp8_train.cpp)
    const Tensor b32 = contiguous_as(bias, DType::f32);
    const float* bv = b32.data<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) pc[m * N + n] += bv[n];
  }
  if (!c32.same(c)) c.copy_(c32);
}

}  // namespace st::ops::cpu
