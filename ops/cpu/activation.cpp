// CPU GELU (tanh form), ReLU and SiLU: plain loops over contiguous f32, same formulas as PyTorch's
// CPU kernels (GeluKernel: inner = β(x + κx³), β = √2·(2/√π)·½; SiLU: ops/cpu/silu.h).
#include <cmath>

#include "ops/activation.h"
#include "ops/cpu/common.h"
#include "ops/cpu_math/elementary.h"
#include "ops/cpu/f32_out.h"
#include "ops/cpu/silu.h"

namespace st::ops::cpu {
namespace {
constexpr float kBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kKappa = 0.044715f;
}  // namespace

void gelu_fwd(const Tensor& x, Tensor& y) {
  Tensor x32 = as_f32(x);
  F32Out out(y);
  const float* px = x32.data<float>();
  float* py = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = px[i];
    const float inner = kBeta * (v + kKappa * v * v * v);
    py[i] = 0.5f * v * (1.f + tanh_f32(inner));
  }
  out.store();
}

void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  Tensor x32 = as_f32(x), g32 = as_f32(dy);
  F32Out out(dx);
  const float* px = x32.data<float>();
  const float* pg = g32.data<float>();
  float* pd = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = px[i], v2 = v * v;
    const float t = tanh_f32(kBeta * (v + kKappa * v2 * v));
    // d/dx [½x(1+t)] = ½(1+t) + ½x(1−t²)·β(1 + 3κx²)
    const float d = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * v2);
    pd[i] = pg[i] * d;
  }
  out.store();
}

void relu_fwd(const Tensor& x, Tensor& y) {
  Tensor x32 = as_f32(x);
  F32Out out(y);
  const float* px = x32.data<float>();
  float* py = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) py[i] = px[i] > 0.f ? px[i] : 0.f;
  out.store();
}

void relu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  Tensor x32 = as_f32(x), g32 = as_f32(dy);
  F32Out out(dx);
  const float* px = x32.data<float>();
  const float* pg = g32.data<float>();
  float* pd = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) pd[i] = px[i] > 0.f ? pg[i] : 0.f;
  out.store();
}

void silu_fwd(const Tensor& x, Tensor& y) {
  Tensor x32 = as_f32(x);
  F32Out out(y);
  const float* px = x32.data<float>();
  float* py = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) py[i] = silu_f32(px[i]);
  out.store();
}

void silu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  Tensor x32 = as_f32(x), g32 = as_f32(dy);
  F32Out out(dx);
  const float* px = x32.data<float>();
  const float* pg = g32.data<float>();
  float* pd = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) pd[i] = silu_grad_f32(px[i], pg[i]);
  out.store();
}

}  // namespace st::ops::cpu
