// The fused, chunked LM head + cross-entropy (ops/lm_head_loss.h) on the CPU:
//   - against a double reference of cross_entropy(h·wᵀ) and central finite differences (the op
//     harness), over chunks that do not divide the rows, with ignored rows, i32 and i64 targets;
//   - against the unfused ops (matmul then cross_entropy) on the same inputs: bit for bit in f32
//     and bf16 where the header says so (power-of-two count and dloss, chunk rows a multiple of
//     256), to a stated roundoff otherwise;
//   - the chunk rule, the errors, no gradient without grad mode, one backward only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ops/cross_entropy.h"
#include "ops/lm_head_loss.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

namespace {

std::vector<int64_t> some_targets(int64_t n, int64_t V, int64_t ignore_every) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = (ignore_every && i % ignore_every == 2) ? -100 : (i * 7919 + 13) % V;
  return t;
}

// The double reference: CE(h·wᵀ) over rows of h (N, C), w (V, C).
std::vector<double> reference(const std::vector<double>& h, const std::vector<double>& w, int64_t N, int64_t C,
                              int64_t V, const std::vector<int64_t>& t, int64_t ignore) {
  return ref::cross_entropy(ref::matmul(h, w, 1, N, V, C, false, true, false), V, t, ignore);
}

struct Result {
  double loss;
  std::vector<double> dh, dw;
};
// loss and the gradients of dloss·loss, fused (chunk rows `rows`) or unfused, in `dt`
Result run(const Tensor& h32, const Tensor& w32, const Tensor& t, DType dt, bool fused, int64_t rows, double dloss) {
  Tensor h = h32.to(dt).detach().requires_grad_(), w = w32.to(dt).detach().requires_grad_();
  Tensor loss = fused ? ops::lm_head_cross_entropy(h, w, t, -100, rows)
                      : ops::cross_entropy(ops::matmul(h, w, false, true), t);  // (N, V) logits
  loss.backward(Tensor::full({}, dloss));
  EXPECT_EQ(h.grad().dtype(), dt);
  EXPECT_EQ(w.grad().dtype(), dt);
  return {loss.item(), h.grad().to_double(), w.grad().to_double()};
}

void draw(Tensor& x, uint64_t seed, float lo, float hi) {
  Generator g(seed, 0);
  fill_uniform(x, g, lo, hi);
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST(OpsLmHeadLoss, MatchesTheReferenceAndFiniteDifferencesOverUnevenChunks) {
  // 13 rows in chunks of 5 (5, 5, 3), rows 2 and 7 ignored, V 37; the harness also runs f16/bf16
  // against f32 by relative norm error (σ = 2¹⁵ in f16)
  const int64_t N = 13, C = 8, V = 37;
  for (DType it : {DType::i64, DType::i32}) {
    const std::vector<int64_t> t = some_targets(N, V, 5);
    Tensor targets = Tensor::from_vector(t, {N}).to(it);
    check_op({.name = std::string("lm_head_cross_entropy (13,8)·(37,8)ᵀ chunks of 5, targets ") + dtype_name(it),
              .shapes = {{N, C}, {V, C}},
              .op = [targets](auto& x) { return ops::lm_head_cross_entropy(x[0], x[1], targets, -100, 5); },
              .ref = [t](auto& x) { return reference(x[0], x[1], N, C, V, t, -100); },
              .lo = -1.5f,
              .hi = 1.5f});
  }
}

TEST(OpsLmHeadLoss, OneRowPerChunkAndOneChunkForAll) {
  const int64_t N = 6, C = 5, V = 11;
  const std::vector<int64_t> t = some_targets(N, V, 0);
  Tensor targets = Tensor::from_vector(t, {N});
  for (int64_t rows : {1, 1000})
    check_op({.name = "lm_head_cross_entropy chunks of " + std::to_string(rows),
              .shapes = {{N, C}, {V, C}},
              .op = [targets, rows](auto& x) { return ops::lm_head_cross_entropy(x[0], x[1], targets, -100, rows); },
              .ref = [t](auto& x) { return reference(x[0], x[1], N, C, V, t, -100); }});
}

// The header's claim: with a power-of-two count (512 rows, none ignored) and dloss (0.25) and chunks
// of 256 rows (the CPU GEMM's depth block), the loss and both gradients are the unfused ops' bits,
// in f32 and in bf16 — the same roundings of the same numbers, the scale applied at the end.
TEST(OpsLmHeadLoss, EqualsTheUnfusedOpsBitForBitWhereTheHeaderSaysSo) {
  const int64_t N = 512, C = 40, V = 300;
  Tensor h = Tensor::empty({N, C}), w = Tensor::empty({V, C});
  draw(h, 3, -2.f, 2.f);
  draw(w, 4, -1.f, 1.f);
  Tensor t = Tensor::from_vector(some_targets(N, V, 0), {N});
  for (DType dt : {DType::f32, DType::bf16}) {
    const Result a = run(h, w, t, dt, true, 256, 0.25), b = run(h, w, t, dt, false, 0, 0.25);
    EXPECT_EQ(a.loss, b.loss) << dtype_name(dt);
    EXPECT_TRUE(same_bits(a.dh, b.dh)) << dtype_name(dt) << ": dh differs, rel " << rel_err(a.dh, b.dh);
    EXPECT_TRUE(same_bits(a.dw, b.dw)) << dtype_name(dt) << ": dw differs, rel " << rel_err(a.dw, b.dw);
  }
}

// Elsewhere the two differ by roundoff only: chunks of 100 rows (dw's sums regrouped at other
// boundaries) and dloss 0.3 (k = 0.3/512 not a power of two: the scale rounds at another place).
// f32: measured 3e-7 relative; bound 1e-6 (a few f32 ulps of the sums, ≪ the 1e-5 the HF fixture
// test allows). f16 / bf16: the two round p·k and p (then ×k) to the low-precision dtype, each
// gradient element's sum cancelling (Σ p = 1 against the target's −1), so they differ by a few
// of its roundings (measured 3.5e-3 in bf16, 4.3e-4 in f16); what matters is that the fused path
// is no less accurate: its error against the f32 result within 1.25× the unfused path's (measured
// ratios 0.93 in both), and the two within 1e-2 of each other. The loss in f32 is the unfused one to 1 ulp
// (row losses summed in double in the same order by both).
TEST(OpsLmHeadLoss, EqualsTheUnfusedOpsToRoundoffElsewhere) {
  const int64_t N = 512, C = 40, V = 300;
  Tensor h = Tensor::empty({N, C}), w = Tensor::empty({V, C});
  draw(h, 5, -2.f, 2.f);
  draw(w, 6, -1.f, 1.f);
  Tensor t = Tensor::from_vector(some_targets(N, V, 0), {N});
  const Result ref = run(h, w, t, DType::f32, true, 100, 0.3), unf = run(h, w, t, DType::f32, false, 0, 0.3);
  EXPECT_NEAR(ref.loss, unf.loss, std::fabs(unf.loss) * 1.2e-7);
  EXPECT_LT(rel_err(ref.dh, unf.dh), 1e-6);
  EXPECT_LT(rel_err(ref.dw, unf.dw), 1e-6);
  std::printf("f32, chunks of 100, dloss 0.3: |dh − unfused| %.2e, |dw − unfused| %.2e (relative norms)\n",
              rel_err(ref.dh, unf.dh), rel_err(ref.dw, unf.dw));
  for (DType dt : {DType::bf16, DType::f16}) {
    const Result a = run(h, w, t, dt, true, 100, 0.3), b = run(h, w, t, dt, false, 0, 0.3);
    EXPECT_LT(rel_err(a.dh, ref.dh), 1.25 * rel_err(b.dh, ref.dh)) << dtype_name(dt);
    EXPECT_LT(rel_err(a.dw, ref.dw), 1.25 * rel_err(b.dw, ref.dw)) << dtype_name(dt);
    EXPECT_LT(rel_err(a.dh, b.dh), 1e-2) << dtype_name(dt);
    EXPECT_LT(rel_err(a.dw, b.dw), 1e-2) << dtype_name(dt);
    EXPECT_NEAR(a.loss, b.loss, std::fabs(b.loss) * 1.2e-7) << dtype_name(dt);  // the same logits' bits
    std::printf("%s, chunks of 100, dloss 0.3: against f32 dh %.2e (unfused %.2e), dw %.2e (unfused %.2e); "
                "against unfused dh %.2e, dw %.2e\n",
                dtype_name(dt), rel_err(a.dh, ref.dh), rel_err(b.dh, ref.dh), rel_err(a.dw, ref.dw),
                rel_err(b.dw, ref.dw), rel_err(a.dh, b.dh), rel_err(a.dw, b.dw));
  }
}

TEST(OpsLmHeadLoss, ChunkRule) {
  // 128 MiB of logits per chunk, a multiple of 256 rows when ≥ 256 (the header says why)
  EXPECT_EQ(ops::lm_head_chunk_rows(50304, DType::bf16), 1280);  // 1334 rows of 100 608 bytes
  EXPECT_EQ(ops::lm_head_chunk_rows(50257, DType::f16), 1280);
  EXPECT_EQ(ops::lm_head_chunk_rows(50304, DType::f32), 512);   // 667
  EXPECT_EQ(ops::lm_head_chunk_rows(256, DType::f32), 131072);
  const int64_t prev = ops::set_lm_head_chunk_bytes(4096);
  EXPECT_EQ(prev, int64_t{128} << 20);
  EXPECT_EQ(ops::lm_head_chunk_rows(100, DType::f32), 10);
  EXPECT_EQ(ops::lm_head_chunk_rows(5000, DType::f32), 1);  // at least one row
  ops::set_lm_head_chunk_bytes(prev);
  EXPECT_THROW(ops::set_lm_head_chunk_bytes(0), ValueError);
  EXPECT_EQ(ops::lm_head_grad_prescale(DType::f16), 32768.f);
  EXPECT_EQ(ops::lm_head_grad_prescale(DType::bf16), 1.f);
}

TEST(OpsLmHeadLoss, AllIgnoredIsNaNWithZeroGradientsAndBadTargetsThrow) {
  Tensor h = Tensor::ones({3, 4}).requires_grad_(), w = Tensor::ones({5, 4}).requires_grad_();
  Tensor all_ignored = Tensor::from_vector(std::vector<int64_t>{-100, -100, -100}, {3});
  Tensor loss = ops::lm_head_cross_entropy(h, w, all_ignored, -100, 2);
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  for (double g : h.grad().to_double()) EXPECT_EQ(g, 0.0);
  for (double g : w.grad().to_double()) EXPECT_EQ(g, 0.0);
  try {  // row 3 of 4, in the second chunk of 2
    ops::lm_head_cross_entropy(Tensor::zeros({4, 4}), Tensor::zeros({5, 4}),
                               Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 5}, {4}), -100, 2);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("target 5 at position 3"), std::string::npos) << m;
    EXPECT_NE(m.find("V = 5"), std::string::npos) << m;
  }
  Tensor t = Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, {3});
  EXPECT_THROW(ops::lm_head_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 3}), t), ShapeError);
  EXPECT_THROW(ops::lm_head_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 4}), t.narrow(0, 0, 2)), ShapeError);
  EXPECT_THROW(ops::lm_head_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 4}, DType::bf16), t), DTypeError);
  EXPECT_THROW(ops::lm_head_cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({5, 4}), Tensor::zeros({3})), DTypeError);
}

TEST(OpsLmHeadLoss, NoGradientWithoutGradModeAndOneBackwardOnly) {
  Tensor h = Tensor::empty({9, 6}), w = Tensor::empty({7, 6});
  draw(h, 8, -1.f, 1.f);
  draw(w, 9, -1.f, 1.f);
  h.requires_grad_();
  w.requires_grad_();
  Tensor t = Tensor::from_vector(some_targets(9, 7, 4), {9});
  Tensor with_grad = ops::lm_head_cross_entropy(h, w, t, -100, 4);
  {
    NoGradGuard ng;
    Tensor no_grad = ops::lm_head_cross_entropy(h, w, t, -100, 4);
    EXPECT_EQ(no_grad.item(), with_grad.item());
    EXPECT_FALSE(no_grad.requires_grad());
  }
  with_grad.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_THROW(with_grad.backward(), ValueError);  // its gradients were handed out
}
