// The ring (context-parallel) attention of N ranks simulated on one process with the block ops
// (ops/block_attention.h, ops/attention_merge.h, ops/ring_schedule.h), on the device the tensors
// live on: split q, k, v by the load-balanced layout, run every rank's ring steps (forward: block
// attention + merge; backward: Δ once per query chunk, each block's dq added, its dk / dv summed per
// key chunk as the owner would receive them), reassemble. Shared by tests/ops/test_ring_attention.cpp
// (CPU) and tests/gpu/test_gpu_ring_attention.cpp (CUDA).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/attention_merge.h"
#include "ops/block_attention.h"
#include "ops/ring_schedule.h"

namespace st::test::ring {

using namespace st::ops;

// n values in [−a, a] from a fixed integer stream (splitmix64): the same on every machine
inline std::vector<float> values(int64_t n, uint64_t seed, float a) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = seed;
  for (auto& e : v) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    e = a * (static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f);
  }
  return v;
}

inline Tensor rand4(int64_t B, int64_t H, int64_t T, int64_t D, uint64_t seed, float a) {
  return Tensor::from_vector(values(B * H * T * D, seed, a), {B, H, T, D});
}

// chunk c (length C) of x (B, H, T, D) → (B, H, C, D)
inline Tensor chunk(const Tensor& x, int64_t c, int64_t C) { return x.narrow(2, c * C, C).contiguous(); }

// dst (B, H, T, Dl) += part (B, H, C, Dl) at chunk c; lse rows are Dl = 1
inline void add_chunk(std::vector<double>& dst, const Tensor& part, int64_t c, int64_t C, int64_t T) {
  const std::vector<double> p = part.to_double();
  const int64_t BH = part.size(0) * part.size(1), Dl = part.dim() == 4 ? part.size(3) : 1;
  for (int64_t i = 0; i < BH; ++i)
    for (int64_t t = 0; t < C; ++t)
      for (int64_t d = 0; d < Dl; ++d) dst[(i * T + c * C + t) * Dl + d] += p[(i * C + t) * Dl + d];
}

// k (B, Hkv, T, D) → (B, H, T, D): head h is key/value head h / (H / Hkv)
inline Tensor expand_heads(const Tensor& k, int64_t H) {
  const int64_t B = k.size(0), Hkv = k.size(1), T = k.size(2), D = k.size(3), n = T * D;
  const std::vector<float> x = k.to_float();
  std::vector<float> y(static_cast<size_t>(B * H * n));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) y[(b * H + h) * n + i] = x[(b * Hkv + h / (H / Hkv)) * n + i];
  return Tensor::from_vector(y, {B, H, T, D});
}

// dk (B, H, T, D) → (B, Hkv, T, D): each key/value head's gradient summed over its query heads
inline std::vector<double> reduce_heads(const Tensor& dk, int64_t Hkv) {
  const int64_t B = dk.size(0), H = dk.size(1), n = dk.size(2) * dk.size(3);
  const std::vector<double> x = dk.to_double();
  std::vector<double> y(static_cast<size_t>(B * Hkv * n), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) y[(b * Hkv + h / (H / Hkv)) * n + i] += x[(b * H + h) * n + i];
  return y;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

struct Rank {
  Tensor q[2], k[2], v[2], dout[2];  // local chunks (B, H|Hkv, C, D), in local order
  Tensor out[2], lse[2];             // the merged accumulators (B, H, C, D), (B, H, C)
  int64_t chunk[2];
};

struct Ring {
  int64_t N, C, T;
  std::vector<Rank> ranks;
};

// The ring forward of N simulated ranks on q (B, H, T, D), k, v (B, Hkv, T, D): step s, rank r
// attends its two query chunks to the key/value chunks of rank (r − s) mod N and merges.
inline Ring ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, int64_t N) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  Ring ring{N, context_chunk_len(T, N), T, std::vector<Rank>(static_cast<size_t>(N))};
  for (int64_t r = 0; r < N; ++r) {
    const std::vector<int64_t> cs = context_chunks(N, r, ContextSplit::load_balanced);
    Rank& st = ring.ranks[r];
    for (int i = 0; i < 2; ++i) {
      st.chunk[i] = cs[i];
      st.q[i] = chunk(q, cs[i], ring.C);
      st.k[i] = chunk(k, cs[i], ring.C);
      st.v[i] = chunk(v, cs[i], ring.C);
      st.dout[i] = chunk(dout, cs[i], ring.C);
      empty_attention(B, H, ring.C, D, st.out[i], st.lse[i], q.device());
    }
  }
  for (int64_t s = 0; s < N; ++s)
    for (int64_t r = 0; r < N; ++r) {
      const Rank& src = ring.ranks[ring_source(N, r, s)];
      Rank& st = ring.ranks[r];
      for (const RingBlock& b : ring_step_blocks(N, r, s, ContextSplit::load_balanced)) {
        EXPECT_EQ(b.k_chunk, src.chunk[b.k_slot]);
        if (b.kind == RingPair::skipped) continue;
        BlockAttention y =
            block_attention_fwd(st.q[b.q_slot], src.k[b.k_slot], src.v[b.k_slot], ring_block_mask(b.kind));
        merge_attention(st.out[b.q_slot], st.lse[b.q_slot], y.out, y.lse);
      }
    }
  return ring;
}

struct Grads {
  std::vector<double> dq, dk, dv;
};

// The ring backward: Δ once per query chunk from the merged out (also handed to each block, as the
// runtime's ring does: CUDA's cuDNN blocks form Δ from it); each block adds its dq share
// and returns its dk / dv, which go back to the key chunk's owner (summed here per chunk).
inline Grads ring_backward(Ring& ring, int64_t Hkv) {
  const Tensor& q0 = ring.ranks[0].q[0];
  const int64_t B = q0.size(0), H = q0.size(1), D = q0.size(3), T = ring.T, N = ring.N;
  Grads g{std::vector<double>(static_cast<size_t>(B * H * T * D), 0.0),
          std::vector<double>(static_cast<size_t>(B * Hkv * T * D), 0.0),
          std::vector<double>(static_cast<size_t>(B * Hkv * T * D), 0.0)};
  std::vector<Tensor> delta(static_cast<size_t>(2 * N)), dq(static_cast<size_t>(2 * N));
  for (int64_t r = 0; r < N; ++r)
    for (int i = 0; i < 2; ++i) {
      delta[2 * r + i] = attention_delta(ring.ranks[r].out[i], ring.ranks[r].dout[i]);
      dq[2 * r + i] = Tensor::zeros({B, H, ring.C, D}, DType::f32, q0.device());
    }
  for (int64_t s = 0; s < N; ++s)
    for (int64_t r = 0; r < N; ++r) {
      const Rank& src = ring.ranks[ring_source(N, r, s)];
      const Rank& st = ring.ranks[r];
      for (const RingBlock& b : ring_step_blocks(N, r, s, ContextSplit::load_balanced)) {
        if (b.kind == RingPair::skipped) continue;
        const int i = b.q_slot, j = b.k_slot;
        BlockGrads bg = block_attention_bwd(st.q[i], src.k[j], src.v[j], st.dout[i], st.lse[i], delta[2 * r + i],
                                            ring_block_mask(b.kind), dq[2 * r + i], st.out[i]);
        add_chunk(g.dk, bg.dk, b.k_chunk, ring.C, T);
        add_chunk(g.dv, bg.dv, b.k_chunk, ring.C, T);
      }
    }
  for (int64_t r = 0; r < N; ++r)
    for (int i = 0; i < 2; ++i) add_chunk(g.dq, dq[2 * r + i], ring.ranks[r].chunk[i], ring.C, T);
  return g;
}

}  // namespace st::test::ring
