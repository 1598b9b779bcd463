// Rotary position embedding (RoPE) the way Hugging Face's Llama computes it (LlamaRotaryEmbedding,
// apply_rotary_pos_emb, "rotate half" layout), for the causal attention op, which applies it to q
// and k as it reads them (ops/attention.h), and for the KV-cache decode path (apply_rope below).
//
//   inv_freq (D/2) f32   inv_freq[i] = 1 / θ^(2i/D): the exponent rd(2i / D), θ^e rounded to f32
//                        (θ rounded to f32 first), then the reciprocal in f32 — HF's
//                        1.0 / (base ** (arange(0, D, 2).float() / D))
//   llama3 scaling       inv_freq adjusted by HF's _compute_llama3_parameters, in f32 in HF's order
//                        of operations (rope_llama3_inv_freq)
//   angle (p, i)         rd(inv_freq[i] · p) in f32 (HF: inv_freq @ position_ids.float())
//   cos, sin (P, D/2) f32  of the angles, each rounded once to f32; HF's emb = cat(freqs, freqs)
//                        repeats column i at i + D/2
//   x' = x·c + rotate_half(x)·s, rotate_half(x) = cat(−x[D/2:], x[:D/2]), with c, s rounded to x's
//        dtype and each product and the sum rounded to x's dtype, as HF computes it in q's dtype:
//        for d < D/2 and c, s at (p, d)
//          x'[d]       = rd(rd(x[d]·c) − rd(x[d + D/2]·s))
//          x'[d + D/2] = rd(rd(x[d + D/2]·c) + rd(x[d]·s))
//        Every backend (the CPU kernel, the CUDA kernels, apply_rope's tensor ops) computes exactly
//        this, so a roped operand has the same bits everywhere.
//   backward             x' = R·x with R a rotation (up to rounding) ⇒ dx = Rᵀ·dx':
//                        dx[d] = c·dx'[d] + s·dx'[d + D/2], dx[d + D/2] = c·dx'[d + D/2] − s·dx'[d]
//
// CPU-model independence: pow, sin and cos come from ops/cpu_math/elementary.h (no libm: glibc picks FMA
// or SSE2 variants of sin/cos by the CPU), so a table has the same bits on every x86-64 machine; the
// CUDA kernels read a copy uploaded once, so their values equal the CPU's bit for bit. Against HF:
// torch's own f32 pow/cos/sin (Sleef on the CPU, cosf on CUDA) are within 1 ulp, not always the
// nearest float; ours are the nearest but in rare near-ties, so a few table entries may differ from
// HF's by 1 ulp of f32.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "tensor/tensor.h"

namespace st::ops {

// HF rope_scaling with rope_type "llama3" (Llama 3.1 / 3.2 defaults)
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct RopeConfig {
  double theta = 10000.0;  // rope_theta
  int64_t head_dim = 0;    // D, even
  bool llama3 = false;     // apply `scaling` (rope_scaling.rope_type == "llama3")
  RopeScaling scaling;
};

// inv_freq (D/2) f32 without scaling. ValueError for θ ≤ 0 or an odd / non-positive D.
std::vector<float> rope_default_inv_freq(double theta, int64_t head_dim);
// HF's _compute_llama3_parameters: wavelengths 2π/inv_freq above original/low_freq_factor are
// divided by `factor`, below original/high_freq_factor kept, in between interpolated by
// smooth = (original/wavelen − low) / (high − low): (1 − smooth)·inv/factor + smooth·inv.
// In f32 as torch evaluates HF's expressions (a scalar over a tensor is reciprocal × scalar).
std::vector<float> rope_llama3_inv_freq(const std::vector<float>& inv_freq, const RopeScaling& s);
// the config's inv_freq: the default one, then the llama3 adjustment when asked for
std::vector<float> rope_inv_freq(const RopeConfig& c);

// The cos / sin tables of positions [0, P), built once on the host (P·D/2 sin/cos pairs: 95 ms
// for 8192 positions at D 128 on the loaded 2-core dev VM, so size P to the run's context) and
// copied to a device at its first use there: a synchronous upload, so make that first use before
// any CUDA graph capture (the trainer's eager warm-up step does). Not copyable (it owns the
// copies); the model holds it and must keep it alive while autograd nodes point at it.
class RopeTable {
 public:
  RopeTable(const RopeConfig& config, int64_t positions);  // 1 ≤ P ≤ 2²⁴ (positions exact in f32)
  const RopeConfig& config() const { return config_; }
  int64_t head_dim() const { return config_.head_dim; }
  int64_t positions() const { return positions_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // cos, sin (P, D/2) f32 contiguous on `device` (the host tables, or their copy there)
  Tensor cos(Device device = Device::cpu) const;
  Tensor sin(Device device = Device::cpu) const;

 private:
  RopeConfig config_;
  int64_t positions_;
  std::vector<float> inv_freq_;
  Tensor cos_, sin_;  // (P, D/2) f32 on the CPU
  mutable std::mutex mu_;
  mutable Tensor cos_dev_, sin_dev_;  // the CUDA copies, made at first use
};

// x (B, T, n, D) of any float dtype, positions (B, T) i64 on x's device → x' (B, T, n, D), row
// (b, t) rotated by the angles of position positions[b, t]: the expression above, built from tensor
// ops (embedding gather of the tables, mul, add), so it runs on any device and is differentiable.
// The KV-cache decode path ropes q and k with it (runtime/nn/cached_attention.h); positions outside
// [0, P) are a ValueError (the gather's).
Tensor apply_rope(const Tensor& x, const RopeTable& table, const Tensor& positions);

}  // namespace st::ops
