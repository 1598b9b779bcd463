// Sequence parallelism's fused linears (runtime/parallel/sp_linear.h) under mpirun (tp = the
// world): each equals the composition it replaces — gather_seq_from_sp → local_linear, and
// local_linear → reduce_scatter_seq_to_sp — bit for bit in its output and every gradient (the same
// kernels on the same operands, the same collectives: exactly equal, no tolerance), for weights
// (in, out) and (out, in), with and without a bias; and it keeps what the header says: after the
// forward the bytes in use have grown by its output alone, where the composition's also hold the
// gathered (B, T, K) input (column) or the (B, T, N) partial sums (row). A group of one rank is a
// ValueError (the callers keep the plain product there).
#include <gtest/gtest.h>

#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/parallel/sp_linear.h"
#include "runtime/parallel/tp_layers.h"
#include "tensor/autograd.h"
#include "tensor/memory_category.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::tptest::exactly_equal;
using st::tptest::leaf;
using st::tptest::dot;
using st::tptest::P;
using st::tptest::R;
using st::tptest::randn;
using st::tptest::tp;

namespace {


int64_t in_use() { return static_cast<int64_t>(memory_usage(Device::cpu).total_in_use); }

struct Result {
  Tensor y, dx, dw, db;
  int64_t grew = 0;  // bytes in use after the forward, less before it
};

}  // namespace

TEST(SpLinear, ColumnEqualsGatherThenLinearAndKeepsTheShard) {
  const int64_t B = 2, n = 3, K = 8, N = 6;  // x (B, n, K) this rank's positions, T = n·tp
  if (P() == 1) {
    EXPECT_THROW(sp_column_linear(Tensor::zeros({B, n, K}), Tensor::zeros({K, N}), Tensor(), false, tp()), ValueError);
    return;
  }
  const Tensor X = randn({B, n, K}, 10 + static_cast<uint64_t>(R()));  // each rank its own positions
  const Tensor G = randn({B, n * P(), N}, 20);                        // the output's gradient, replicated
  for (bool out_in : {false, true})
    for (bool bias : {true, false}) {
      const Tensor W = randn(out_in ? Shape{N, K} : Shape{K, N}, 30), b = randn({N}, 31);
      auto run = [&](bool fused) {
        Tensor x = leaf(X), w = leaf(W), bb = bias ? leaf(b) : Tensor();
        Result r;
        const int64_t before = in_use();
        r.y = fused ? sp_column_linear(x, w, bb, out_in, tp())
                    : local_linear(gather_seq_from_sp(x, tp()), w, bb, out_in, nullptr);  // (B, T, N)
        r.grew = in_use() - before;
        dot(r.y, G).backward();
        r.dx = x.grad(), r.dw = w.grad(), r.db = bias ? bb.grad() : Tensor();
        return r;
      };
      const Result want = run(false), got = run(true);
      const std::string what = std::string(out_in ? "(out, in)" : "(in, out)") + (bias ? " with bias" : "");
      EXPECT_TRUE(exactly_equal(got.y, want.y)) << what;
      EXPECT_TRUE(exactly_equal(got.dx, want.dx)) << what;
      EXPECT_TRUE(exactly_equal(got.dw, want.dw)) << what;
      if (bias) {
        EXPECT_TRUE(exactly_equal(got.db, want.db)) << what;
      }
      // kept after the forward: the output only (x, the shard, is the caller's); the composition
      // also keeps the gathered (B, T, K) input — and with a bias the product before it
      const int64_t y_bytes = got.y.numel() * 4, gathered = B * n * P() * K * 4;
      EXPECT_EQ(got.grew, y_bytes) << what;
      EXPECT_EQ(want.grew, y_bytes * (bias ? 2 : 1) + gathered) << what;
    }
}

TEST(SpLinear, RowEqualsLinearThenReduceScatterAndKeepsNoPartialSums) {
  const int64_t B = 2, n = 3, K = 5, N = 6;  // x (B, T, K) this rank's K-slice, T = n·tp
  if (P() == 1) {
    EXPECT_THROW(sp_row_linear(Tensor::zeros({B, n, K}), Tensor::zeros({K, N}), false, tp()), ValueError);
    return;
  }
  const int64_t T = n * P();
  const Tensor X = randn({B, T, K}, 40 + static_cast<uint64_t>(R()));
  const Tensor G = randn({B, n, N}, 50 + static_cast<uint64_t>(R()));  // the gradient of this rank's positions
  for (bool out_in : {false, true}) {
    const Tensor W = randn(out_in ? Shape{N, K} : Shape{K, N}, 60 + static_cast<uint64_t>(R()));
    auto run = [&](bool fused) {
      Tensor x = leaf(X), w = leaf(W);
      Result r;
      const int64_t before = in_use();
      r.y = fused ? sp_row_linear(x, w, out_in, tp())
                  : reduce_scatter_seq_to_sp(local_linear(x, w, Tensor(), out_in, nullptr), tp());  // (B, n, N)
      r.grew = in_use() - before;
      dot(r.y, G).backward();
      r.dx = x.grad(), r.dw = w.grad();
      return r;
    };
    const Result want = run(false), got = run(true);
    const std::string what = out_in ? "(out, in)" : "(in, out)";
    EXPECT_TRUE(exactly_equal(got.y, want.y)) << what;
    EXPECT_TRUE(exactly_equal(got.dx, want.dx)) << what;
    EXPECT_TRUE(exactly_equal(got.dw, want.dw)) << what;
    // kept after the forward: the output only; the composition also the (B, T, N) partial sums
    const int64_t y_bytes = got.y.numel() * 4;
    EXPECT_EQ(got.grew, y_bytes) << what;
    EXPECT_EQ(want.grew, y_bytes + B * T * N * 4) << what;
  }
}
