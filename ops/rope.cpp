// Rotary tables and the tensor-op form of the rotation (ops/rope.h). Every f32 expression below is
// a plain float operation (the build pins SSE2 and -ffp-contract=off: one rounding each, no fused
// multiply-add), written in the order torch evaluates HF's Python.
#include "ops/rope.h"

#include <cmath>
#include <numbers>
#include <optional>

#include "ops/check.h"
#include "ops/cpu_math/elementary.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "tensor/graph.h"

namespace st::ops {

std::vector<float> rope_default_inv_freq(double theta, int64_t head_dim) {
  ST_CHECK(theta > 0 && std::isfinite(theta), ValueError, "rope: theta must be positive, got " << theta);
  ST_CHECK(head_dim >= 2 && head_dim % 2 == 0, ValueError, "rope: head_dim must be even and ≥ 2, got " << head_dim);
  const double base = static_cast<float>(theta);  // torch: the scalar base of `base ** tensor` in f32
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);  // arange(0, D, 2).float() / D
    const float p = static_cast<float>(cpu::pow_f64(base, e));                // base ** e, rounded to f32
    inv[static_cast<size_t>(i)] = 1.0f / p;                                    // 1.0 / (…)
  }
  return inv;
}

std::vector<float> rope_llama3_inv_freq(const std::vector<float>& inv_freq, const RopeScaling& s) {
  ST_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
               s.original_max_position_embeddings > 0,
           ValueError,
           "rope llama3 scaling: need factor > 0, high_freq_factor > low_freq_factor > 0 and "
           "original_max_position_embeddings > 0, got factor "
               << s.factor << ", low " << s.low_freq_factor << ", high " << s.high_freq_factor << ", original "
               << s.original_max_position_embeddings);
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  // Python scalars meet f32 tensors as f32 (torch's wrapped-number promotion)
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi), factor = static_cast<float>(s.factor);
  const float old_f = static_cast<float>(old_len), low = static_cast<float>(s.low_freq_factor);
  const float span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  std::vector<float> out(inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float inv = inv_freq[i];
    const float wavelen = (1.0f / inv) * two_pi;  // 2π / inv_freq = inv_freq.reciprocal() * 2π
    const float llama = wavelen > low_wavelen ? inv / factor : inv;
    const float smooth = ((1.0f / wavelen) * old_f - low) / span;  // (old / wavelen − low) / (high − low)
    const float smoothed = ((1.0f - smooth) * llama) / factor + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    out[i] = medium ? smoothed : llama;
  }
  return out;
}

std::vector<float> rope_inv_freq(const RopeConfig& c) {
  std::vector<float> inv = rope_default_inv_freq(c.theta, c.head_dim);
  return c.llama3 ? rope_llama3_inv_freq(inv, c.scaling) : inv;
}

RopeTable::RopeTable(const RopeConfig& config, int64_t positions)
    : config_(config), positions_(positions), inv_freq_(rope_inv_freq(config)) {
  ST_CHECK(positions >= 1 && positions <= (int64_t{1} << 24), ValueError,
           "rope: the table's positions must be in [1, 2^24], got " << positions);
  const int64_t half = config.head_dim / 2;
  cos_ = Tensor::empty({positions, half}, DType::f32, Device::cpu);  // (P, D/2)
  sin_ = Tensor::empty({positions, half}, DType::f32, Device::cpu);  // (P, D/2)
  float *pc = cos_.data<float>(), *ps = sin_.data<float>();
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq_[static_cast<size_t>(i)] * static_cast<float>(p);  // f32 product
      double s, c;
      cpu::sincos_f64(angle, s, c);
      pc[p * half + i] = static_cast<float>(c);
      ps[p * half + i] = static_cast<float>(s);
    }
}

namespace {
// The table's one copy to a device, at its first use there: in the trainer's eager warm-up step,
// which runs under the host-read guard of a graph step (tensor/graph.h) — this copy is meant, so
// the guard is lifted for it; inside a capture it stays (a first use there is a CaptureError).
Tensor upload(const Tensor& host, Device device) {
  std::optional<AllowHostReads> allow;
  if (!capturing_graph()) allow.emplace();
  return host.to(device);
}
}  // namespace

Tensor RopeTable::cos(Device device) const {
  if (device == Device::cpu) return cos_;
  std::lock_guard<std::mutex> lock(mu_);
  if (!cos_dev_.defined()) cos_dev_ = upload(cos_, device);
  return cos_dev_;
}

Tensor RopeTable::sin(Device device) const {
  if (device == Device::cpu) return sin_;
  std::lock_guard<std::mutex> lock(mu_);
  if (!sin_dev_.defined()) sin_dev_ = upload(sin_, device);
  return sin_dev_;
}

Tensor apply_rope(const Tensor& x, const RopeTable& table, const Tensor& positions) {
  const char* name = "apply_rope";
  check_defined(name, {x, positions});
  check_floating(name, x);
  const int64_t D = table.head_dim(), half = D / 2;
  ST_CHECK(x.dim() == 4 && x.size(3) == D && positions.dim() == 2 && positions.size(0) == x.size(0) &&
               positions.size(1) == x.size(1),
           ShapeError,
           name << ": x " << shape_str(x.shape()) << " and positions " << shape_str(positions.shape())
                << " (expected x (B, T, n, " << D << ") and positions (B, T))");
  const int64_t B = x.size(0), T = x.size(1);
  auto gathered = [&](const Tensor& tab) {  // (P, D/2) → (B, T, 1, D) in x's dtype: HF's cat(freqs, freqs)
    Tensor g = embedding(tab, positions);   // (B, T, D/2) f32
    return Tensor::cat({g, g}, 2).to(x.dtype()).reshape({B, T, 1, D});
  };
  const Tensor c = gathered(table.cos(x.device())), s = gathered(table.sin(x.device()));
  Tensor rot = Tensor::cat({scale(x.narrow(3, half, half), -1.0), x.narrow(3, 0, half)}, 3);  // rotate_half(x)
  return add(mul(x, c), mul(rot, s));                                                           // (B, T, n, D)
}

}  // namespace st::ops
