// CPU results do not depend on the machine (docs/testing.md "CPU numerics"). Eigen sizes its
// GEMM blocks from the cache sizes it detects; Eigen::setCpuCacheSizes overrides the detected
// values, so forcing a small and a large cache here stands in for two different CPUs. Each test
// runs the same computation under the detected, a small and a large setting and compares the
// results bit for bit: a matmul of awkward sizes (blocked along K at the small setting) with its
// backward, causal attention with its backward, and three AdamW steps of a small transformer
// block through the ops. The same steps are also compared with the bits recorded where the
// test was written, which is the check that matters when the suite runs on another machine.
// The CPU ops run on one thread (no OpenMP, no Eigen threads, no std::thread in the kernels),
// so there is no thread count to vary.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/optim.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"

using namespace st;

namespace {

struct CacheSizes {
  const char* name;
  std::ptrdiff_t l1, l2, l3;
};
// small: Eigen splits K into blocks of 120 (kc from L1); large: no K blocking below K = 8184.
const CacheSizes kSmall{"small caches (8 KiB / 64 KiB / 512 KiB)", 8 << 10, 64 << 10, 512 << 10};
const CacheSizes kLarge{"large caches (512 KiB / 8 MiB / 64 MiB)", 512 << 10, 8 << 20, 64 << 20};

// Sets Eigen's cache sizes for its scope and restores the previous ones.
class CacheGuard {
 public:
  explicit CacheGuard(const CacheSizes& c)
      : l1_(Eigen::l1CacheSize()), l2_(Eigen::l2CacheSize()), l3_(Eigen::l3CacheSize()) {
    Eigen::setCpuCacheSizes(c.l1, c.l2, c.l3);
  }
  ~CacheGuard() { Eigen::setCpuCacheSizes(l1_, l2_, l3_); }

 private:
  std::ptrdiff_t l1_, l2_, l3_;
};

using Outputs = std::vector<std::vector<float>>;

// Runs fn with the detected caches, then with kSmall and kLarge, and expects the same bits.
void expect_same_bits_under_cache_sizes(const std::function<Outputs()>& fn) {
  const Outputs ref = fn();
  for (const CacheSizes& c : {kSmall, kLarge}) {
    CacheGuard g(c);
    const Outputs got = fn();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i].size(), ref[i].size());
      size_t differ = 0;
      double max_abs = 0;
      for (size_t j = 0; j < ref[i].size(); ++j)
        if (std::memcmp(&got[i][j], &ref[i][j], sizeof(float)) != 0) {
          ++differ;
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[i][j]) - ref[i][j]));
        }
      EXPECT_EQ(differ, 0u) << "output " << i << " under " << c.name << ": " << differ << " of " << ref[i].size()
                            << " values differ from the detected-cache run, max |diff| " << max_abs;
    }
  }
}

Tensor uniform(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(s);
  Generator g(seed);
  fill_uniform(t, g, lo, hi);
  return t;
}

// (k, m, n) Eigen's heuristic picks for a product under the current cache sizes.
std::vector<Eigen::Index> eigen_blocking(Eigen::Index m, Eigen::Index n, Eigen::Index k) {
  Eigen::internal::computeProductBlockingSizes<float, float, 1>(k, m, n);
  return {k, m, n};
}

}  // namespace

// The forced settings really are two different machines to Eigen: its own blocking differs.
// (Without this the tests below could pass because setCpuCacheSizes did nothing.)
TEST(CpuNumerics, ForcedCacheSizesChangeEigensBlocking) {
  std::vector<Eigen::Index> small, large;
  {
    CacheGuard g(kSmall);
    small = eigen_blocking(317, 389, 1031);
  }
  {
    CacheGuard g(kLarge);
    large = eigen_blocking(317, 389, 1031);
  }
  EXPECT_LT(small[0], 1031) << "small caches: K is split";
  EXPECT_NE(small, large);
}

// op(a) (317, 1031) · op(b) (1031, 389) and both gradients, untransposed and both transposed
// (the backward of the first runs the NT and TN products).
TEST(CpuNumerics, MatmulAndBackwardSameBitsUnderAnyCacheSizes) {
  const int64_t M = 317, K = 1031, N = 389;
  const Tensor a0 = uniform({M, K}, 11), b0 = uniform({K, N}, 12), g0 = uniform({M, N}, 13);
  const Tensor at0 = uniform({K, M}, 14), bt0 = uniform({N, K}, 15);
  expect_same_bits_under_cache_sizes([&] {
    Outputs out;
    for (bool t : {false, true}) {
      Tensor a = (t ? at0 : a0).detach().requires_grad_(), b = (t ? bt0 : b0).detach().requires_grad_();
      Tensor c = ops::matmul(a, b, t, t);  // (M, N)
      c.backward(g0);
      out.push_back(c.to_float());
      out.push_back(a.grad().to_float());
      out.push_back(b.grad().to_float());
    }
    return out;
  });
}

// q, k, v (1, 2, 300, 64): the score and output products have depth 64 and 300.
TEST(CpuNumerics, AttentionAndBackwardSameBitsUnderAnyCacheSizes) {
  const Tensor q0 = uniform({1, 2, 300, 64}, 21), k0 = uniform({1, 2, 300, 64}, 22), v0 = uniform({1, 2, 300, 64}, 23);
  const Tensor g0 = uniform({1, 2, 300, 64}, 24);
  expect_same_bits_under_cache_sizes([&] {
    Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
    Tensor o = ops::causal_attention(q, k, v);
    o.backward(g0);
    return Outputs{o.to_float(), q.grad().to_float(), k.grad().to_float(), v.grad().to_float()};
  });
}

namespace {

// Three AdamW steps of embedding → layernorm → causal self-attention (3 heads of 64) → residual
// → layernorm → MLP (192 → 768 → 192, GELU) → residual → LM head (V 300) → cross-entropy, on
// 2 × 160 tokens: every GEMM has M, N ≥ 160 and depth 160 … 768. Returns the three losses and
// the final weights.
Outputs train_block() {
  const int64_t B = 2, T = 160, C = 192, H = 3, V = 300, F = 4 * C;
  std::vector<int64_t> ids(static_cast<size_t>(B * T + 1));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919 + 13) % V);
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end() - 1), {B * T});
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>(ids.begin() + 1, ids.end()), {B * T});
  const std::vector<Shape> shapes = {{V, C}, {C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C},
                                     {C},    {C}, {C, F},  {F},     {F, C}, {C},   {C, V}};
  std::vector<Tensor> w, m, v;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bool ln_gain = i == 1 || i == 7;
    w.push_back(ln_gain ? Tensor::ones(shapes[i]) : uniform(shapes[i], 100 + i, -0.1f, 0.1f));
    w.back().requires_grad_();
    m.push_back(Tensor::zeros(shapes[i]));
    v.push_back(Tensor::zeros(shapes[i]));
  }
  Outputs out;
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor x = ops::embedding(w[0], tokens);                                       // (B·T, C)
    Tensor h = ops::linear(ops::layernorm(x, w[1], w[2]), w[3], w[4]);             // (B·T, 3C)
    Tensor a = ops::causal_attention_qkv(h.reshape({B, T, 3 * C}), H);            // (B, T, C)
    x = ops::add(x, ops::linear(a.reshape({B * T, C}), w[5], w[6]));
    Tensor f = ops::gelu(ops::linear(ops::layernorm(x, w[7], w[8]), w[9], w[10]));  // (B·T, F)
    x = ops::add(x, ops::linear(f, w[11], w[12]));
    Tensor loss = ops::cross_entropy(ops::matmul(x, w[13]), targets);  // (B·T, V) logits
    loss.backward();
    out.push_back(loss.to_float());
    NoGradGuard ng;
    for (size_t i = 0; i < w.size(); ++i) {
      ops::adamw_step(w[i], w[i].grad(), m[i], v[i], {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}, step);
      w[i].zero_grad(true);
    }
  }
  for (const Tensor& t : w) out.push_back(t.to_float());
  return out;
}

// FNV-1a over the bits of every value, output after output.
uint64_t fnv1a(const Outputs& outs) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& o : outs)
    for (float f : o) {
      uint32_t b;
      std::memcpy(&b, &f, sizeof b);
      for (int i = 0; i < 4; ++i) h = (h ^ ((b >> (8 * i)) & 0xff)) * 1099511628211ULL;
    }
  return h;
}

}  // namespace

TEST(CpuNumerics, TrainingStepsSameBitsUnderAnyCacheSizes) { expect_same_bits_under_cache_sizes(train_block); }

// The same steps give the bits recorded on the machine that wrote this test (an Intel Xeon, GCC
// 12.2, Eigen 3.4.0, glibc 2.36): what "the same bits on any x86-64 machine" means when this
// suite runs somewhere else. The bits belong to the build's ingredients (docs/testing.md "CPU
// numerics"): Eigen's GEBP kernel and the instruction set are part of them, so another Eigen
// version or SHARDTRAIN_CPU_ARCH is not checked; the loss is compared first so that a change
// shows where it starts.
TEST(CpuNumerics, TrainingStepsMatchRecordedBits) {
  const std::string eigen = std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                            std::to_string(EIGEN_MINOR_VERSION);
  if (eigen != "3.4.0") GTEST_SKIP() << "bits recorded with Eigen 3.4.0, this build uses " << eigen;
  // recorded with the default SHARDTRAIN_CPU_ARCH=x86-64; x86-64-v3 (AVX2, FMA) has other bits
  if (std::string(Eigen::SimdInstructionSetsInUse()) != "SSE, SSE2")
    GTEST_SKIP() << "bits recorded for SSE2 (SHARDTRAIN_CPU_ARCH=x86-64), this build vectorizes with "
                 << Eigen::SimdInstructionSetsInUse();
  const Outputs out = train_block();
  EXPECT_EQ(out[0][0], 0x1.7a97a8p+2f) << std::hexfloat << "first loss " << out[0][0];
  EXPECT_EQ(fnv1a(out), 0x2c1bed2767d82e80ULL) << std::hex << "hash of losses and weights 0x" << fnv1a(out);
}
