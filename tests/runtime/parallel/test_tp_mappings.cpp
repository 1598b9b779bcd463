// The paired tensor-parallel functions under mpirun, in closed form: forward values and the
// gradients their backward delivers (Σ over ranks = p(p+1)/2 etc.), on the world as the tp group
// and on tp-2 sub-groups of a process grid (np 4).
#include <gtest/gtest.h>

#include "comm/process_grid.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/parallel/tensor_parallel.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::tptest::exactly_equal;

namespace {

// Runs every check on group `tp`.
void check_mappings(const TpGroup& tp) {
  const int p = tp_size(tp), r = tp_rank(tp);
  const double tri = p * (p + 1) / 2.0;
  {  // copy_to_tp: y = x; loss = Σ y·(r+1) → dx = Σ_q (q+1)
    Tensor x = tptest::leaf(Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}));
    Tensor y = copy_to_tp(x, tp);
    EXPECT_TRUE(exactly_equal(y.detach(), x.detach()));
    ops::sum(ops::scale(y, r + 1)).backward();
    EXPECT_TRUE(exactly_equal(x.grad(), Tensor::full({3}, tri)));
  }
  {  // reduce_from_tp: x = (r+1)·[1, 2, 3] → y = tri·[1, 2, 3]; loss = Σ y·(r+1) → dx = r+1
    Tensor x = tptest::leaf(Tensor::from_vector(std::vector<float>{1.f + r, 2.f * (r + 1), 3.f * (r + 1)}, {3}));
    Tensor y = reduce_from_tp(x, tp);
    EXPECT_TRUE(exactly_equal(y.detach(), Tensor::from_vector(std::vector<double>{tri, 2 * tri, 3 * tri}, {3})));
    ops::sum(ops::scale(y, r + 1)).backward();
    EXPECT_TRUE(exactly_equal(x.grad(), Tensor::full({3}, r + 1.0)));
  }
  {  // gather_from_tp: x (2, 3) = 100r + 3i + j → y (2, 3p), y[i, 3q + j] = 100q + 3i + j;
     // loss = Σ y·k (k the column) → dx[i, j] = 3r + j
    std::vector<float> xv;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) xv.push_back(static_cast<float>(100 * r + 3 * i + j));
    Tensor x = tptest::leaf(Tensor::from_vector(xv, {2, 3}));
    Tensor y = gather_from_tp(x, tp);
    ASSERT_EQ(y.shape(), (Shape{2, 3 * p}));
    std::vector<double> yv = y.to_double(), want_y, col, want_g;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 3 * p; ++k) {
        want_y.push_back(100.0 * (k / 3) + 3 * i + k % 3);
        col.push_back(k);
      }
    EXPECT_EQ(yv, want_y);
    ops::sum(ops::mul(y, Tensor::from_vector(col, {2, 3 * p}))).backward();
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want_g.push_back(3.0 * r + j);
    EXPECT_EQ(x.grad().to_double(), want_g);
  }
  {  // scatter_to_tp: x (2, 3p) = 10i + k → y = x[:, 3r : 3r+3]; loss = Σ y·(r+1) → dx[i, k] = k/3 + 1
    std::vector<float> xv;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 3 * p; ++k) xv.push_back(static_cast<float>(10 * i + k));
    Tensor x = tptest::leaf(Tensor::from_vector(xv, {2, 3 * p}));
    Tensor y = scatter_to_tp(x, tp);
    std::vector<double> want_y, want_g;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want_y.push_back(10.0 * i + 3 * r + j);
    EXPECT_EQ(y.to_double(), want_y);
    ops::sum(ops::scale(y, r + 1)).backward();
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 3 * p; ++k) want_g.push_back(k / 3 + 1.0);
    EXPECT_EQ(x.grad().to_double(), want_g);
  }
}

// The sequence-parallel pairs on group `tp`: (B 2, 2 positions per rank, C 3), rank r holding
// positions [2r, 2r + 2) of T = 2p. Every value a small integer: exact in f32, any summation order.
void check_seq_mappings(const TpGroup& tp) {
  const int p = tp_size(tp), r = tp_rank(tp);
  const double tri = p * (p + 1) / 2.0;
  const int64_t B = 2, n = 2, C = 3, T = n * p;
  {  // gather_seq_from_sp: x[b, t, c] = 100r + 10b + 3t + c → y[b, u, c] = 100⌊u/2⌋ + 10b + 3(u mod 2) + c;
     // loss = Σ y·(r+1)(u+1) → dx[b, t, c] = Σ_q (q+1)·(2r + t + 1) = tri·(2r + t + 1) (a reduce-scatter)
    std::vector<float> xv;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < C; ++c) xv.push_back(static_cast<float>(100 * r + 10 * b + 3 * t + c));
    Tensor x = tptest::leaf(Tensor::from_vector(xv, {B, n, C}));
    Tensor y = gather_seq_from_sp(x, tp);
    ASSERT_EQ(y.shape(), (Shape{B, T, C}));
    std::vector<double> want_y, w, want_g;
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < T; ++u)
        for (int c = 0; c < C; ++c) {
          want_y.push_back(100.0 * (u / 2) + 10 * b + 3 * (u % 2) + c);
          w.push_back((r + 1.0) * (u + 1));
        }
    EXPECT_EQ(y.to_double(), want_y);
    ops::sum(ops::mul(y, Tensor::from_vector(w, {B, T, C}))).backward();
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < C; ++c) want_g.push_back(tri * (2 * r + t + 1));
    EXPECT_EQ(x.grad().to_double(), want_g);
  }
  {  // reduce_scatter_seq_to_sp: x[b, u, c] = (r+1)(10b + 3u + c) → y[b, t, c] = tri·(10b + 3(2r + t) + c);
     // loss = Σ y·(r+1)(t+1) → dx[b, u, c] = (⌊u/2⌋ + 1)(u mod 2 + 1) (an all-gather)
    std::vector<float> xv;
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < T; ++u)
        for (int c = 0; c < C; ++c) xv.push_back(static_cast<float>((r + 1) * (10 * b + 3 * u + c)));
    Tensor x = tptest::leaf(Tensor::from_vector(xv, {B, T, C}));
    Tensor y = reduce_scatter_seq_to_sp(x, tp);
    ASSERT_EQ(y.shape(), (Shape{B, n, C}));
    std::vector<double> want_y, w, want_g;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < C; ++c) {
          want_y.push_back(tri * (10 * b + 3 * (2 * r + t) + c));
          w.push_back((r + 1.0) * (t + 1));
        }
    EXPECT_EQ(y.to_double(), want_y);
    ops::sum(ops::mul(y, Tensor::from_vector(w, {B, n, C}))).backward();
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < T; ++u)
        for (int c = 0; c < C; ++c) want_g.push_back((u / 2 + 1.0) * (u % 2 + 1));
    EXPECT_EQ(x.grad().to_double(), want_g);
  }
  {  // scatter_seq_to_sp: x[b, u, c] = 10b + 3u + c replicated → y = x[:, 2r : 2r+2];
     // loss = Σ y·(r+1) → dx[b, u, c] = ⌊u/2⌋ + 1
    std::vector<float> xv;
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < T; ++u)
        for (int c = 0; c < C; ++c) xv.push_back(static_cast<float>(10 * b + 3 * u + c));
    Tensor x = tptest::leaf(Tensor::from_vector(xv, {B, T, C}));
    Tensor y = scatter_seq_to_sp(x, tp);
    std::vector<double> want_y, want_g;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < C; ++c) want_y.push_back(10.0 * b + 3 * (2 * r + t) + c);
    EXPECT_EQ(y.to_double(), want_y);
    ops::sum(ops::scale(y, r + 1)).backward();
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < T; ++u)
        for (int c = 0; c < C; ++c) want_g.push_back(u / 2 + 1.0);
    EXPECT_EQ(x.grad().to_double(), want_g);
  }
}

}  // namespace

TEST(TpMappings, ClosedFormsOnTheWorld) { check_mappings(tptest::world()); }

TEST(TpMappings, SequenceParallelClosedFormsOnTheWorld) { check_seq_mappings(tptest::world()); }

TEST(TpMappings, SequenceScatterOfAnIndivisibleLengthThrowsOnEveryRank) {
  const int p = tptest::world()->size();
  Tensor x = Tensor::zeros({2, p + 1, 3});  // T = p + 1
  if (p > 1) {
    EXPECT_THROW(scatter_seq_to_sp(x, tptest::world()), ShapeError);
    EXPECT_THROW(reduce_scatter_seq_to_sp(x, tptest::world()), ShapeError);
  } else {
    EXPECT_TRUE(scatter_seq_to_sp(x, tptest::world()).same(x));
  }
}

TEST(TpMappings, ClosedFormsOnTp2GroupsOfAGrid) {
  const int n = tptest::world()->size();
  if (n % 2 != 0) {
    EXPECT_THROW(comm::GridLayout::make(n, 0, 2, 1), ValueError);  // odd worlds have no tp-2 layout
    return;
  }
  comm::ProcessGrid grid(tptest::world(), 0, 2, 1);
  ASSERT_EQ(grid.tp_group()->size(), 2);
  check_mappings(grid.tp_group());
  check_seq_mappings(grid.tp_group());
}

TEST(TpMappings, NullGroupIsTheIdentity) {
  Tensor x = tptest::leaf(Tensor::from_vector(std::vector<float>{1, 2}, {2}));
  EXPECT_TRUE(copy_to_tp(x, nullptr).same(x));
  EXPECT_TRUE(reduce_from_tp(x, nullptr).same(x));
  EXPECT_TRUE(gather_from_tp(x, nullptr).same(x));
  EXPECT_TRUE(scatter_to_tp(x, nullptr).same(x));
}

TEST(TpMappings, ScatterOfAnIndivisibleWidthThrowsOnEveryRank) {
  const int p = tptest::world()->size();
  Tensor x = Tensor::zeros({2, p + 1});
  if (p > 1)
    EXPECT_THROW(scatter_to_tp(x, tptest::world()), ShapeError);
  else
    EXPECT_TRUE(scatter_to_tp(x, tptest::world()).same(x));  // a group of one: identity
}
