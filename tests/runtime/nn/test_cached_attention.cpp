// runtime/nn/cached_attention.h on the KV cache: decoding a batch token by token — a prompt pass of
// rows of different lengths, then one position per row and step, each row at its own position —
// gives, at every position, the full causal forward of ops::causal_attention_qkv(qkv, H, Hkv, rope)
// on the whole sequence, for grouped-query, multi-query and multi-head layouts with rotary
// embedding (llama3 scaling) and without; the cache holds Hkv heads.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/attention.h"
#include "runtime/nn/cached_attention.h"
#include "tensor/rng.h"

using namespace st;
using namespace st::runtime;

namespace {

struct Case {
  int64_t H, Hkv, D;
  bool rope;
};

// Decodes rows of N positions (prompt lengths `prompt`) and returns the largest difference from the
// full forward over all rows and positions; `kv_bytes` gets the cache's bytes at the end.
double decode_against_full(const Case& c, const std::vector<int64_t>& prompt, int64_t N, int64_t& kv_bytes) {
  const int64_t B = static_cast<int64_t>(prompt.size()), W = (c.H + 2 * c.Hkv) * c.D, A = c.H * c.D;
  ops::RopeConfig rc;
  rc.theta = 500000.0;
  rc.head_dim = c.D;
  rc.llama3 = true;
  rc.scaling.original_max_position_embeddings = 8;  // small positions reach every band
  const ops::RopeTable table(rc, 64);
  const ops::RopeTable* rope = c.rope ? &table : nullptr;
  Generator gen(17);
  Tensor qkv = Tensor::empty({B, N, W});  // the rows' projections at every position
  fill_normal(qkv, gen, 0.f, 1.f);
  const std::vector<float> full = ops::causal_attention_qkv(qkv, c.H, c.Hkv, rope).to_float();  // (B, N, A)
  const std::vector<float> x = qkv.to_float();

  KvCache cache(N);
  KvSlot& slot = cache.slot(0);
  double worst = 0;
  // the prompt pass: T0 = the longest prompt, shorter rows right-padded with their next positions
  const int64_t T0 = *std::max_element(prompt.begin(), prompt.end());
  CacheStep step = make_cache_step(std::vector<int64_t>(static_cast<size_t>(B), 0), prompt, Device::cpu);
  std::vector<float> y = cached_attention_qkv(qkv.narrow(1, 0, T0).contiguous(), c.H, c.Hkv, rope, slot, step).to_float();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < prompt[b]; ++t)
      for (int64_t i = 0; i < A; ++i)
        worst = std::max(worst, std::fabs(double(y[(b * T0 + t) * A + i]) - full[(b * N + t) * A + i]));
  // one position per row and step, row b at its own position len[b]
  std::vector<int64_t> len = prompt;
  while (*std::min_element(len.begin(), len.end()) < N) {
    std::vector<float> rows(static_cast<size_t>(B * W));
    std::vector<int64_t> pos(len);
    for (int64_t b = 0; b < B; ++b) {
      pos[b] = std::min(len[b], N - 1);  // a finished row repeats its last position (its output unchecked)
      std::copy_n(x.begin() + (b * N + pos[b]) * W, W, rows.begin() + b * W);
    }
    step = make_cache_step(pos, std::vector<int64_t>(static_cast<size_t>(B), 1), Device::cpu);
    y = cached_attention_qkv(Tensor::from_vector(rows, {B, 1, W}), c.H, c.Hkv, rope, slot, step).to_float();
    for (int64_t b = 0; b < B; ++b) {
      if (len[b] >= N) continue;
      for (int64_t i = 0; i < A; ++i) worst = std::max(worst, std::fabs(double(y[b * A + i]) - full[(b * N + len[b]) * A + i]));
      ++len[b];
    }
  }
  kv_bytes = cache.bytes();
  return worst;
}

}  // namespace

// The cached product q·K[:S]ᵀ and the causal kernel's per-head sgemm sum in other orders (f32,
// |y| ≲ 2, depth ≤ 12): measured ≤ 3e-7; 1e-5 is above that and far below one wrong position or
// rotation (≥ 1e-2 with these inputs: a key roped at the wrong position, a query head on the wrong
// group or a stale cache slot move outputs by O(0.1)).
TEST(CachedAttention, DecodeEqualsTheFullForwardAtEveryPosition) {
  const std::vector<int64_t> prompt = {3, 1, 5};
  const int64_t N = 12;
  for (const Case& c : {Case{4, 2, 8, true}, Case{6, 1, 4, true}, Case{2, 2, 6, true}, Case{4, 2, 8, false},
                        Case{3, 3, 4, false}}) {
    int64_t bytes = 0;
    const double worst = decode_against_full(c, prompt, N, bytes);
    const std::string what = "H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + (c.rope ? " rope" : "");
    EXPECT_LT(worst, 1e-5) << what;
    // the cache holds the key/value heads only: K and V (B, Hkv, N, D) f32
    EXPECT_EQ(bytes, 2 * 3 * c.Hkv * N * c.D * 4) << what;
  }
}

TEST(CachedAttention, BadHeadsAreShapeErrors) {
  KvCache cache(8);
  const CacheStep step = make_cache_step({0}, {2}, Device::cpu);
  EXPECT_THROW(cached_attention_qkv(Tensor::zeros({1, 2, 28}), 3, 2, nullptr, cache.slot(0), step), ShapeError);
  ops::RopeConfig rc;
  rc.head_dim = 6;
  const ops::RopeTable table(rc, 8);
  EXPECT_THROW(cached_attention_qkv(Tensor::zeros({1, 2, 32}), 4, 2, &table, cache.slot(0), step), ShapeError);
  // q and k with different head sizes straight into the slot
  EXPECT_THROW(cache.slot(1).attend(Tensor::zeros({1, 3, 2, 4}), Tensor::zeros({1, 2, 2, 4}), Tensor::zeros({1, 2, 2, 4}),
                                    step),
               ShapeError);
}
