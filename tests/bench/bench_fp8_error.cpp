// How far FP8 training's linear layer lands from f32 (CPU; ops/fp8_linear.h against ops::linear
// on the same inputs and the same incoming gradient): relative norm errors ‖out − ref‖ / ‖ref‖ of
// y, dx and dw, for E5M2 and E4M3 gradients, current and delayed scaling (history 16), power-of-
// two scales on and off, on two kinds of data:
//   normal  x ~ N(0, 1), w ~ N(0, 0.02), g ~ N(0, 1)
//   gpt     x: per-token scale e^N(0, 0.3) · N(0, 1) with 4 outlier channels of 768 at 40× (the
//           outlier features of GPT-2's residual stream); w ~ N(0, 0.02); g: heavy-tailed,
//           per-token scale e^N(0, 1) · e^N(0, 0.5) · N(0, 1) (a few tokens carry most gradient)
// A run is 3 warm-up steps then 8 measured ones; the data drift as training does: x grows 2 % a
// step, g 10 % a step, and at measured step 5 the gradient spikes 8× for one step (what delayed
// scaling sees late). Per configuration: the mean over measured steps, the worst step, and the
// largest fraction of gradient elements that saturated in a step (|g·s| beyond max + half its
// ulp: clamped, not just rounded to max). Delayed scaling also runs with margin 2 (s 4× smaller:
// headroom for growth, at the price of 2 binades of range at the bottom). The bf16 line is
// ops::linear on bf16-rounded inputs, for scale. Deterministic (fixed seeds); one thread.
//   usage: bench_fp8_error [--tokens 256] [--width 768]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/fp8_linear.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"

using namespace st;
using namespace st::ops;

namespace {

struct StepData {
  std::vector<float> x, w, g;  // (M, K), (K, N), (M, N)
};

constexpr int kWarmup = 3, kMeasured = 8, kSpikeStep = kWarmup + 5;

StepData make_step(bool gpt, int step, int64_t M, int64_t K, int64_t N) {
  std::mt19937 gen(1000u * (gpt ? 2u : 1u) + static_cast<uint32_t>(step));
  std::mt19937 wgen(77);  // the weights stay
  std::normal_distribution<float> n01(0.f, 1.f);
  StepData d;
  const float xm = std::pow(1.02f, static_cast<float>(step));
  const float gm = std::pow(1.1f, static_cast<float>(step)) * (step == kSpikeStep ? 8.f : 1.f);
  d.w.resize(K * N);
  for (float& v : d.w) v = 0.02f * n01(wgen);
  d.x.resize(M * K);
  d.g.resize(M * N);
  for (int64_t m = 0; m < M; ++m) {
    const float tok_x = gpt ? std::exp(0.3f * n01(gen)) : 1.f, tok_g = gpt ? std::exp(n01(gen)) : 1.f;
    for (int64_t k = 0; k < K; ++k) {
      const bool outlier = gpt && (k % (K / 4)) == 7;  // 4 channels
      d.x[m * K + k] = xm * tok_x * (outlier ? 40.f : 1.f) * n01(gen);
    }
    for (int64_t n = 0; n < N; ++n)
      d.g[m * N + n] = gm * tok_g * (gpt ? std::exp(0.5f * n01(gen)) : 1.f) * n01(gen);
  }
  return d;
}

double rel_err(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_double(), vb = b.to_double();
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Outputs {
  Tensor y, dx, dw;
};

// y = linear(x, w) and its gradients for the incoming g, in `dt` (reference: f32), or with fp8_linear
Outputs run(const StepData& d, int64_t M, int64_t K, int64_t N, DType dt, Fp8LinearState* fp8) {
  Tensor x = Tensor::from_vector(d.x, {M, K}).to(dt).detach().requires_grad_();
  Tensor w = Tensor::from_vector(d.w, {K, N}).to(dt).detach().requires_grad_();
  Tensor y = fp8 ? fp8_linear(x, w, Tensor(), *fp8) : linear(x, w);
  y.backward(Tensor::from_vector(d.g, {M, N}).to(dt));
  return {y.detach().to(DType::f32), x.grad().to(DType::f32), w.grad().to(DType::f32)};
}

struct Summary {
  double mean[3] = {0, 0, 0}, worst[3] = {0, 0, 0}, clipped = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t M = 256, K = 768;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) M = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--width")) K = std::atoll(argv[i + 1]);
  }
  const int64_t N = K;
  std::printf("fp8_linear vs f32 linear: M %lld tokens, K = N = %lld; %d warm-up + %d measured steps "
              "(x +2 %%/step, g +10 %%/step, g 8x at measured step 5)\n",
              static_cast<long long>(M), static_cast<long long>(K), kWarmup, kMeasured);
  std::printf("relative norm error, mean over measured steps (worst step); clipped: largest fraction of g saturated in a step\n\n");
  std::printf("| data | grad | scaling | pow2 | y | dx | dw | g clipped |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (bool gpt : {false, true}) {
    std::vector<StepData> steps;
    std::vector<Outputs> ref, bf;
    for (int t = 0; t < kWarmup + kMeasured; ++t) {
      steps.push_back(make_step(gpt, t, M, K, N));
      ref.push_back(run(steps.back(), M, K, N, DType::f32, nullptr));
      bf.push_back(t >= kWarmup ? run(steps.back(), M, K, N, DType::bf16, nullptr) : Outputs{});
    }
    Summary b;
    for (int t = kWarmup; t < kWarmup + kMeasured; ++t) {
      const double e[3] = {rel_err(bf[t].y, ref[t].y), rel_err(bf[t].dx, ref[t].dx), rel_err(bf[t].dw, ref[t].dw)};
      for (int j = 0; j < 3; ++j) {
        b.mean[j] += e[j] / kMeasured;
        b.worst[j] = std::max(b.worst[j], e[j]);
      }
    }
    const char* data = gpt ? "gpt" : "normal";
    std::printf("| %s | bf16 linear | — | — | %.2e (%.2e) | %.2e (%.2e) | %.2e (%.2e) | — |\n", data, b.mean[0], b.worst[0],
                b.mean[1], b.worst[1], b.mean[2], b.worst[2]);
    struct Config {
      Fp8ScaleMode mode;
      int margin;
      bool pow2;
    };
    const Config configs[] = {{Fp8ScaleMode::current, 0, true},
                              {Fp8ScaleMode::current, 0, false},
                              {Fp8ScaleMode::delayed, 0, true},
                              {Fp8ScaleMode::delayed, 0, false},
                              {Fp8ScaleMode::delayed, 2, true}};
    for (Fp8Format gf : {Fp8Format::e5m2, Fp8Format::e4m3})
      for (const Config& c : configs) {
        const Fp8ScaleMode mode = c.mode;
        Fp8LinearState st =
            fp8_linear_state({.mode = mode, .grad_format = gf, .history = 16, .margin = c.margin, .pow2 = c.pow2});
        Summary s;
        for (int t = 0; t < kWarmup + kMeasured; ++t) {
          // beyond max + half an ulp of max: clamped (e4m3 464, e5m2 61440)
          const float gmax = gf == Fp8Format::e4m3 ? 464.f : 61440.f;
          const float s_before = static_cast<float>(st.grad.scale().item());
          Outputs o = run(steps[t], M, K, N, DType::f32, &st);
          // the s the gradient was cast with: the state's before the step (delayed) or after it (current)
          const float sg = mode == Fp8ScaleMode::delayed ? s_before : static_cast<float>(st.grad.scale().item());
          fp8_linear_update(st);
          if (t < kWarmup) continue;
          int64_t clipped = 0;
          for (float v : steps[t].g) clipped += std::fabs(v * sg) > gmax;
          s.clipped = std::max(s.clipped, static_cast<double>(clipped) / static_cast<double>(steps[t].g.size()));
          const double e[3] = {rel_err(o.y, ref[t].y), rel_err(o.dx, ref[t].dx), rel_err(o.dw, ref[t].dw)};
          for (int j = 0; j < 3; ++j) {
            s.mean[j] += e[j] / kMeasured;
            s.worst[j] = std::max(s.worst[j], e[j]);
          }
        }
        const std::string how = mode == Fp8ScaleMode::current ? "current"
                                : c.margin               ? "delayed 16, margin " + std::to_string(c.margin)
                                                         : "delayed 16";
        std::printf("| %s | %s | %s | %s | %.2e (%.2e) | %.2e (%.2e) | %.2e (%.2e) | %.1e |\n", data,
                    fp8_format_name(gf), how.c_str(), c.pow2 ? "yes" : "no",
                    s.mean[0], s.worst[0], s.mean[1], s.worst[1], s.mean[2], s.worst[2], s.clipped);
        std::fflush(stdout);
      }
  }
  return 0;
}
