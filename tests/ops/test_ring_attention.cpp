// Ring (context-parallel) attention's block ops on one process (ops/block_attention.h,
// ops/attention_merge.h, ops/ring_schedule.h):
//   - a causal block over the whole sequence is the 4-d op's forward, bit for bit;
//   - cp = 2 and 4 simulated: q, k, v split by the load-balanced layout, every rank runs its ring
//     steps (block attention + merge), the reassembled out / lse equal cpu::attention_fwd on the
//     whole sequence, MHA and GQA; the blocks' dq / dk / dv summed per chunk equal
//     cpu::attention_bwd's;
//   - merge's closed form on hand values, empty (lse = −inf) rows included;
//   - the schedule covers every causal (q chunk, k chunk) pair exactly once and gives every rank
//     the same score count (within 10 %) at every step, for N = 2, 4, 8; the contiguous split
//     does not (the balance check can fail).
// Cost: well under a second.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/attention.h"
#include "tests/ops/ring_sim.h"

using namespace st;
using namespace st::ops;
using namespace st::test::ring;

namespace {

void check_ring(int64_t N, int64_t H, int64_t Hkv) {
  SCOPED_TRACE("cp " + std::to_string(N) + ", heads " + std::to_string(H) + "/" + std::to_string(Hkv));
  const int64_t B = 2, T = 8 * N, D = 16;
  Tensor q = rand4(B, H, T, D, 11, 2.f), k = rand4(B, Hkv, T, D, 12, 2.f), v = rand4(B, Hkv, T, D, 13, 1.f);
  Tensor dout = rand4(B, H, T, D, 14, 1.f);
  // the whole sequence through the 4-d op (key/value heads repeated for GQA)
  Tensor ke = expand_heads(k, H), ve = expand_heads(v, H);
  Tensor out = q.empty_like(), lse = Tensor::empty({B, H, T});
  cpu::attention_fwd(q, ke, ve, out, lse);
  Tensor dq = q.empty_like(), dke = q.empty_like(), dve = q.empty_like();
  cpu::attention_bwd(q, ke, ve, out, lse, dout, dq, dke, dve);

  Ring ring = ring_forward(q, k, v, dout, N);
  std::vector<double> ring_out(static_cast<size_t>(B * H * T * D), 0.0), ring_lse(static_cast<size_t>(B * H * T), 0.0);
  for (const Rank& st : ring.ranks)
    for (int i = 0; i < 2; ++i) {
      add_chunk(ring_out, st.out[i], st.chunk[i], ring.C, T);
      add_chunk(ring_lse, st.lse[i], st.chunk[i], ring.C, T);
    }
  // Tolerances. Both sides compute in f32; they differ only in summation order: the ring sums a
  // row's ≤ T exp-weighted values in ≤ 2N blocks and rescales each block's partial result once per
  // merge (weights formed in double, applied in f32: ≤ 2 roundings per merge). |out| ≤ max|v| = 1
  // (a convex combination), so each output differs by at most ~(T + 4N)·ε·max|v| ≈ 48·6e-8 ≈ 3e-6
  // (a worst-case bound; measured ≤ 2.7e-7). lse = max + log(Σ) with |lse| ≤ 10: a few ulps of 10,
  // 1e-5 bounds it (measured ≤ 4.8e-7). A wrong mask, a missing or doubled block or a wrong merge weight moves
  // outputs by ≥ 1e-2 (one key of ≤ 32 in a row).
  EXPECT_LT(max_abs_diff(ring_out, out.to_double()), 5e-6);
  EXPECT_LT(max_abs_diff(ring_lse, lse.to_double()), 1e-5);

  Grads g = ring_backward(ring, Hkv);
  // The gradients: each element is a sum over ≤ T keys (or ≤ T queries) of f32 products, formed in
  // blocks instead of at once, with P rebuilt from an lse that is itself ≤ 5e-7 off (so P is off by
  // ≤ ~5e-7 relative) and Δ from the merged out (≤ 3e-6·max|dO| off); every term is bounded by the
  // largest gradient's scale, so the difference is ≤ ~(T·ε + 1e-6) of max|grad| ≈ 3e-6 of it.
  // 1e-5 of max(1, max|grad|) bounds that; measured ≤ 4e-7 of it (≤ 8e-7 absolute).
  const std::vector<double> rdk = reduce_heads(dke, Hkv), rdv = reduce_heads(dve, Hkv), rdq = dq.to_double();
  EXPECT_LT(max_abs_diff(g.dq, rdq), 1e-5 * std::max(1.0, max_abs(rdq)));
  EXPECT_LT(max_abs_diff(g.dk, rdk), 1e-5 * std::max(1.0, max_abs(rdk)));
  EXPECT_LT(max_abs_diff(g.dv, rdv), 1e-5 * std::max(1.0, max_abs(rdv)));
  // the gradients are not trivially small (the comparison above can fail)
  EXPECT_GT(max_abs(rdq), 0.1);
  EXPECT_GT(max_abs(rdk), 0.1);
  EXPECT_GT(max_abs(rdv), 0.1);
}

}  // namespace

TEST(RingAttention, CausalBlockOverTheWholeSequenceIsTheFourDOpBitForBit) {
  const int64_t B = 2, H = 3, T = 13, D = 8;
  Tensor q = rand4(B, H, T, D, 1, 2.f), k = rand4(B, H, T, D, 2, 2.f), v = rand4(B, H, T, D, 3, 1.f);
  Tensor out = q.empty_like(), lse = Tensor::empty({B, H, T});
  cpu::attention_fwd(q, k, v, out, lse);
  BlockAttention y = block_attention_fwd(q, k, v, BlockMask::causal);
  EXPECT_EQ(y.out.to_float(), out.to_float());
  EXPECT_EQ(y.lse.to_float(), lse.to_float());
}

TEST(RingAttention, FullBlockIsUnmaskedSoftmax) {
  // one query row, keys with scores 0, log 2 ⇒ weights 1/3, 2/3 (D = 1: score = q·k)
  Tensor q = Tensor::from_vector(std::vector<float>{1.f}, {1, 1, 1, 1});
  Tensor k = Tensor::from_vector(std::vector<float>{0.f, std::log(2.f)}, {1, 1, 2, 1});
  Tensor v = Tensor::from_vector(std::vector<float>{3.f, 6.f}, {1, 1, 2, 1});
  BlockAttention y = block_attention_fwd(q, k, v, BlockMask::full);
  EXPECT_NEAR(y.out.to_double()[0], 3.0 / 3 + 6.0 * 2 / 3, 1e-6);
  EXPECT_NEAR(y.lse.to_double()[0], std::log(3.0), 1e-6);
}

TEST(RingAttention, RingOfTwoEqualsWholeAttentionMha) { check_ring(2, 4, 4); }
TEST(RingAttention, RingOfTwoEqualsWholeAttentionGqa) { check_ring(2, 4, 2); }
TEST(RingAttention, RingOfFourEqualsWholeAttentionMha) { check_ring(4, 2, 2); }
TEST(RingAttention, RingOfFourEqualsWholeAttentionGqa) { check_ring(4, 4, 1); }

TEST(RingAttention, MergeClosedForm) {
  const float inf = std::numeric_limits<float>::infinity();
  // rows of (lse_a, lse_b); out_a = (1, 2), out_b = (5, −4) in every row
  const std::vector<float> la = {0.f, std::log(3.f), -inf, 2.f, -inf, 0.f, 0.f, 90.f};
  const std::vector<float> lb = {0.f, 0.f, 1.5f, -inf, -inf, -1000.f, -30.f, 100.f};
  const int64_t R = static_cast<int64_t>(la.size());
  std::vector<float> a, b;
  for (int64_t r = 0; r < R; ++r) {
    a.insert(a.end(), {1.f, 2.f});
    b.insert(b.end(), {5.f, -4.f});
  }
  Tensor out = Tensor::from_vector(a, {1, 1, R, 2}), lse = Tensor::from_vector(la, {1, 1, R});
  // an empty accumulator row holds out 0: row 4 (both empty) is set so
  out.data<float>()[8] = 0.f;
  out.data<float>()[9] = 0.f;
  merge_attention(out, lse, Tensor::from_vector(b, {1, 1, R, 2}), Tensor::from_vector(lb, {1, 1, R}));
  const std::vector<double> o = out.to_double(), l = lse.to_double();
  // (weight of a, lse) by hand: w_a = e^la / (e^la + e^lb)
  const double w10 = 1.0 / (1.0 + std::exp(-10.0)), w30 = 1.0 / (1.0 + std::exp(-30.0));
  const std::vector<std::pair<double, double>> expect = {{0.5, std::log(2.0)},
                                                         {0.75, std::log(4.0)},
                                                         {0.0, 1.5},
                                                         {1.0, 2.0},
                                                         {0.0, -INFINITY},
                                                         {1.0, 0.0},
                                                         {w30, std::log1p(std::exp(-30.0))},
                                                         {1 - w10, 100 + std::log1p(std::exp(-10.0))}};
  for (int64_t r = 0; r < R; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const double wa = expect[r].first;
    const double e0 = r == 4 ? 0.0 : wa * 1 + (1 - wa) * 5, e1 = r == 4 ? 0.0 : wa * 2 + (1 - wa) * -4;
    // f32 results of O(1..100) values: a few ulps
    EXPECT_NEAR(o[2 * r], e0, 1e-6);
    EXPECT_NEAR(o[2 * r + 1], e1, 1e-6);
    if (std::isinf(expect[r].second))
      EXPECT_EQ(l[r], expect[r].second);
    else
      EXPECT_NEAR(l[r], expect[r].second, 1e-5);
  }
  for (double x : o) EXPECT_FALSE(std::isnan(x));
}

TEST(RingAttention, MergeIsSymmetric) {
  // merge(a, b) and merge(b, a) agree to rounding (the weights are the same numbers)
  Tensor oa = rand4(1, 2, 5, 3, 21, 1.f), ob = rand4(1, 2, 5, 3, 22, 1.f);
  Tensor la = Tensor::from_vector(values(10, 23, 3.f), {1, 2, 5}),
         lb = Tensor::from_vector(values(10, 24, 3.f), {1, 2, 5});
  Tensor o1 = oa.clone(), l1 = la.clone(), o2 = ob.clone(), l2 = lb.clone();
  merge_attention(o1, l1, ob, lb);
  merge_attention(o2, l2, oa, la);
  EXPECT_LT(max_abs_diff(o1.to_double(), o2.to_double()), 1e-6);
  EXPECT_EQ(l1.to_float(), l2.to_float());
}

TEST(RingSchedule, EveryCausalPairOnceAndEqualWork) {
  for (int64_t N : {2, 4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(N));
    const int64_t C = 16, T = 2 * N * C;
    std::vector<int> seen(static_cast<size_t>(4 * N * N), 0);  // (q chunk, k chunk)
    int64_t total = 0;
    for (int64_t s = 0; s < N; ++s) {
      int64_t lo = INT64_MAX, hi = 0;
      for (int64_t r = 0; r < N; ++r) {
        for (const RingBlock& b : ring_step_blocks(N, r, s, ContextSplit::load_balanced))
          if (b.kind != RingPair::skipped) {
            EXPECT_EQ(b.kind == RingPair::causal, b.q_chunk == b.k_chunk);
            ++seen[b.q_chunk * 2 * N + b.k_chunk];
          }
        const int64_t w = ring_step_scores(N, r, s, C, ContextSplit::load_balanced);
        lo = std::min(lo, w);
        hi = std::max(hi, w);
        total += w;
      }
      // issue 34: every rank does equal work at every step, within 10 %
      EXPECT_LE(static_cast<double>(hi), 1.10 * static_cast<double>(lo)) << "step " << s;
    }
    for (int64_t qc = 0; qc < 2 * N; ++qc)
      for (int64_t kc = 0; kc < 2 * N; ++kc) EXPECT_EQ(seen[qc * 2 * N + kc], kc <= qc ? 1 : 0) << qc << ", " << kc;
    EXPECT_EQ(total, T * (T + 1) / 2);  // the visible scores of the whole causal attention
    // the naive split's last rank works ≥ 2× its first (so the balance check above can fail)
    int64_t first = 0, last = 0;
    for (int64_t s = 0; s < N; ++s) {
      first += ring_step_scores(N, 0, s, C, ContextSplit::contiguous);
      last += ring_step_scores(N, N - 1, s, C, ContextSplit::contiguous);
    }
    EXPECT_GT(last, 2 * first);
  }
}

TEST(RingSchedule, LoadBalancedChunks) {
  EXPECT_EQ(context_chunks(4, 0, ContextSplit::load_balanced), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(context_chunks(4, 3, ContextSplit::load_balanced), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ring_source(4, 1, 3), 2);
  EXPECT_EQ(context_chunk_len(64, 4), 8);
  EXPECT_THROW(context_chunk_len(60, 4), ValueError);
  EXPECT_THROW(context_chunks(4, 4, ContextSplit::load_balanced), ValueError);
  EXPECT_THROW(ring_source(4, 0, 4), ValueError);
  EXPECT_THROW(ring_block_mask(RingPair::skipped), ValueError);
}

TEST(RingAttention, BadCallsAreTypedErrors) {
  Tensor q = Tensor::ones({1, 4, 3, 8}), k = Tensor::ones({1, 2, 3, 8}), k5 = Tensor::ones({1, 2, 5, 8});
  EXPECT_NO_THROW(block_attention_fwd(q, k5, k5, BlockMask::full));
  EXPECT_THROW(block_attention_fwd(q, k5, k5, BlockMask::causal), ShapeError);  // causal needs Tq = Tk
  EXPECT_THROW(block_attention_fwd(q, Tensor::ones({1, 3, 3, 8}), Tensor::ones({1, 3, 3, 8}), BlockMask::causal),
               ShapeError);  // 3 key/value heads do not divide 4
  EXPECT_THROW(block_attention_fwd(q, k, Tensor::ones({1, 2, 3, 8}, DType::f16), BlockMask::causal), DTypeError);
  BlockAttention y = block_attention_fwd(q, k, k, BlockMask::causal);
  Tensor delta = attention_delta(y.out, q);
  Tensor dq16 = Tensor::zeros({1, 4, 3, 8}, DType::bf16);
  EXPECT_THROW(block_attention_bwd(q, k, k, q, y.lse, delta, BlockMask::causal, dq16), DTypeError);  // f32 accumulator
  Tensor dq = Tensor::zeros({1, 4, 3, 8});
  EXPECT_THROW(block_attention_bwd(q, k, k, q, delta.narrow(2, 0, 2), delta, BlockMask::causal, dq), ShapeError);
  Tensor o16 = Tensor::zeros({1, 4, 3, 8}, DType::bf16), l = y.lse.clone();
  EXPECT_THROW(merge_attention(o16, l, y.out, y.lse), DTypeError);  // the accumulator is f32
}
