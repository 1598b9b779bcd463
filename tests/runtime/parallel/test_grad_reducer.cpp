// GradReducer under mpirun (np 1–4): bucket layout; the reduced gradient against the closed form
// in every element, after accumulation over micro-batches without communication, in f32 and
// through bf16 communication buffers (at most comm_buffers of them, counted in allocated bytes);
// buckets launched in the order their gradients become final, before backward ends; a rank whose
// hooks fire in another order caught in debug mode (comm's caller tag); buckets held for
// finalize(); the skip-communication test hook.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "comm/make_communicator.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "runtime/parallel/grad_reducer.h"
#include "tensor/autograd.h"
#include "tensor/storage.h"

using namespace st;
using namespace st::runtime;

namespace {
std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w = comm::make_communicator("mpi", std::chrono::seconds(60)).world;
  return w;
}

constexpr int64_t kSide = 64;  // parameters (64, 64): 16 KB each in f32

std::vector<std::pair<std::string, Tensor>> make_params(int count = 4) {
  std::vector<std::pair<std::string, Tensor>> ps;
  for (int i = 0; i < count; ++i) {
    Tensor t = Tensor::zeros({kSide, kSide});
    t.requires_grad_();
    ps.push_back({"p" + std::to_string(i), t});
  }
  return ps;
}

// c_i[j] = factor·((rank + 1)(i + 1) + j mod 5) = ∂loss/∂p_i[j] for loss = Σ_i Σ_j p_i[j]·c_i[j]
double coef(int rank, size_t i, int64_t j, double factor) { return factor * ((rank + 1.0) * (i + 1.0) + j % 5); }

Tensor term(const std::vector<std::pair<std::string, Tensor>>& ps, size_t i, int rank, double factor) {
  std::vector<double> c(static_cast<size_t>(kSide * kSide));
  for (int64_t j = 0; j < kSide * kSide; ++j) c[static_cast<size_t>(j)] = coef(rank, i, j, factor);
  return ops::sum(ops::mul(ps[i].second, Tensor::from_vector(c, {kSide, kSide})));
}

// The terms created in `order`; backward runs the latest-created first, so the last one in
// `order` has its gradient final first.
Tensor loss_of(const std::vector<std::pair<std::string, Tensor>>& ps, int rank, double factor,
               std::vector<size_t> order = {}) {
  if (order.empty())
    for (size_t i = 0; i < ps.size(); ++i) order.push_back(i);
  Tensor total;
  for (size_t i : order) {
    Tensor t = term(ps, i, rank, factor);
    total = total.defined() ? ops::add(total, t) : t;
  }
  return total;
}

// Every element of every gradient against Σ_ranks Σ_factors coef, within `rtol` relative.
void expect_sums(const std::vector<std::pair<std::string, Tensor>>& ps, const std::vector<double>& factors,
                 double rtol) {
  const int n = world()->size();
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<double> g = ps[i].second.grad().to_double();
    ASSERT_EQ(static_cast<int64_t>(g.size()), kSide * kSide);
    int64_t bad = 0;
    for (int64_t j = 0; j < kSide * kSide; ++j) {
      double want = 0;
      for (int r = 0; r < n; ++r)
        for (double f : factors) want += coef(r, i, j, f);
      if (std::abs(g[static_cast<size_t>(j)] - want) > rtol * want) {
        if (bad++ < 3) ADD_FAILURE() << ps[i].first << "[" << j << "] = " << g[static_cast<size_t>(j)] << ", want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << ps[i].first << ": elements off";
  }
}
}  // namespace

TEST(GradReducer, BucketsInReverseOrderWithSmallFirstBucket) {
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = 16384;  // one parameter
  opt.bucket_bytes = 3 * 16384;
  GradReducer r(ps, world(), opt);
  ASSERT_EQ(r.num_buckets(), 2);
  EXPECT_EQ(r.bucket_names(0), (std::vector<std::string>{"p3"}));
  EXPECT_EQ(r.bucket_names(1), (std::vector<std::string>{"p2", "p1", "p0"}));
}

TEST(GradReducer, SegmentsAreNeverShared) {
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = 4 * 16384;  // all four would fit in one
  opt.segment = {0, 0, 1, 1};
  GradReducer r(ps, world(), opt);
  ASSERT_EQ(r.num_buckets(), 2);
  EXPECT_EQ(r.bucket_names(0), (std::vector<std::string>{"p3", "p2"}));
  EXPECT_EQ(r.bucket_names(1), (std::vector<std::string>{"p1", "p0"}));
}

TEST(GradReducer, SumsOverRanksAndAccumulates) {
  const int n = world()->size(), rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = 16384;
  opt.bucket_bytes = 2 * 16384;
  GradReducer r(ps, world(), opt);
  r.zero_grad();
  // two micro-batches: the first accumulates locally, the second communicates
  r.set_sync(false);
  loss_of(ps, rank, 1.0).backward();
  EXPECT_TRUE(r.launches().empty()) << "the first micro-batch communicated";
  r.set_sync(true);
  loss_of(ps, rank, 2.0).backward();
  EXPECT_GE(r.launches().size(), 1u) << "buckets should launch during backward";
  r.finalize();
  // integers ≤ 3·(4·4 + 4)·4 (n ≤ 4 ranks): exact in f32
  expect_sums(ps, {1.0, 2.0}, 0.0);
  if (n > 1) {
    EXPECT_EQ(r.stats().bytes, 4 * 16384);
  }
  // next step starts from zero
  r.zero_grad();
  for (auto& [name, p] : ps)
    for (double g : p.grad().to_double()) ASSERT_EQ(g, 0.0) << name;
}

// bf16 communication over f32 gradients through ONE shared communication buffer: every element
// within bf16's rounding, and the reducer's memory is the gradients plus that one buffer.
TEST(GradReducer, Bf16CommunicationThroughOneBuffer) {
  const int rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = 16384;  // four buckets of one parameter
  opt.comm_dtype = DType::bf16;
  opt.comm_buffers = 1;
  GradReducer r(ps, world(), opt);
  const size_t before = cpu_bytes_in_use();
  r.zero_grad();
  // 4 f32 gradients + one (4096,) bf16 buffer: no bf16 copy of every gradient
  EXPECT_EQ(cpu_bytes_in_use() - before, 4u * 16384 + 4096 * 2);
  r.set_sync(true);
  loss_of(ps, rank, 1.001).backward();
  r.finalize();
  // Each rank's gradient (positive) rounded to bf16 once (relative 2^-8), the f32 sum of those
  // rounded once more: |error| ≤ 2·2^-8·sum = sum/128
  expect_sums(ps, {1.001}, 1.0 / 128);
}

// Buckets go out in the order their gradients become final, not in bucket order: p3 (bucket 0,
// the small first bucket) is made the LAST gradient to become final, so an in-order reducer
// would launch nothing until backward's end.
TEST(GradReducer, LaunchesInReadyOrder) {
  const int rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = 16384;  // bucket b holds p(3 − b)
  GradReducer r(ps, world(), opt);
  r.zero_grad();
  r.set_sync(true);
  loss_of(ps, rank, 1.0, {3, 0, 1, 2}).backward();  // final first: p2, p1, p0, then p3
  const std::vector<BucketLaunch>& l = r.launches();
  ASSERT_EQ(l.size(), 4u) << "every bucket should launch from a hook";
  const std::vector<int64_t> want = {1, 2, 3, 0};  // buckets of p2, p1, p0, p3
  for (size_t m = 0; m < 4; ++m) {
    EXPECT_EQ(l[m].bucket, want[m]) << "launch " << m;
    EXPECT_EQ(l[m].hooks_seen, static_cast<int64_t>(m) + 1) << "launch " << m << " should follow its own hook at once";
    EXPECT_FALSE(l[m].from_finalize);
  }
  r.finalize();
  expect_sums(ps, {1.0}, 0.0);
  EXPECT_EQ(r.stats().launched_early, 3);  // all but the one launched by the last hook
}

// A chain x·W0·W1·…·W5 (backward reaches W5 first) with six one-matrix buckets: the first launch
// happens before the last grad-ready hook, by hook count and by the clock, and every element of
// the reduced gradient is the closed form (below).
TEST(GradReducer, FirstBucketLaunchesBeforeBackwardEnds) {
  const int n = world()->size(), rank = world()->rank();
  constexpr int kLayers = 6;
  constexpr int64_t kDim = 16;
  std::vector<std::pair<std::string, Tensor>> ps;
  for (int k = 0; k < kLayers; ++k) {
    Tensor w = Tensor::ones({kDim, kDim});
    w.requires_grad_();
    ps.push_back({"w" + std::to_string(k), w});
  }
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = kDim * kDim * 4;  // one matrix per bucket
  GradReducer r(ps, world(), opt);
  ASSERT_EQ(r.num_buckets(), kLayers);
  std::vector<Clock::time_point> ready(kLayers);
  for (int k = 0; k < kLayers; ++k)  // after the reducer's own hook
    ps[static_cast<size_t>(k)].second.add_grad_ready_hook([&ready, k](const Tensor&) { ready[k] = Clock::now(); });
  r.zero_grad();
  r.set_sync(true);
  Tensor h = Tensor::full({2, kDim}, rank + 1.0);  // (2, kDim)
  for (auto& [name, w] : ps) h = ops::matmul(h, w);
  ops::sum(h).backward();
  const Clock::time_point backward_end = Clock::now();
  const std::vector<BucketLaunch> l = r.launches();
  r.finalize();
  ASSERT_EQ(l.size(), static_cast<size_t>(kLayers));
  const Clock::time_point last_hook = *std::max_element(ready.begin(), ready.end());
  EXPECT_EQ(l.front().bucket, 0) << "w5's bucket is final first";
  EXPECT_LT(l.front().hooks_seen, kLayers) << "the first launch waited for the last gradient";
  EXPECT_LT(l.front().at, last_hook) << "the first launch is not before the last grad-ready hook";
  EXPECT_LT(l.front().at, backward_end);
  EXPECT_EQ(r.stats().launched_early, kLayers - 1);
  // ∂/∂Wk of Σ x·W0⋯W5 with x = (rank+1)·ones(2, d) and every W = ones(d, d) is
  // (x·W0⋯Wk−1)ᵀ·(ones·W5ᵀ⋯Wk+1ᵀ): 2·(rank+1)·d^k·d^(5−k) = 2·(rank+1)·d^5 in every element;
  // over the ranks d^5·n(n+1) = 2^20·n(n+1), n ≤ 4: exact in f32, as is every partial product
  const double want = 2.0 * std::pow(kDim, kLayers - 1) * n * (n + 1) / 2.0;
  for (auto& [name, w] : ps) {
    const std::vector<double> g = w.grad().to_double();
    for (size_t j = 0; j < g.size(); ++j) ASSERT_EQ(g[j], want) << name << "[" << j << "]";
  }
}

// Two equal buckets whose gradients become final in opposite orders on ranks 0 and 1: comm's own
// signature (dtype, count) cannot tell them apart; the reducer's debug check throws on every rank.
TEST(GradReducer, DebugModeCatchesRanksLaunchingInDifferentOrders) {
  const int n = world()->size(), rank = world()->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto group = world()->split(0, rank, "debug");
  group->set_debug_checks(true);
  auto ps = make_params(2);
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = 16384;
  GradReducer r(ps, group, opt);
  r.zero_grad();
  r.set_sync(true);
  Tensor loss = loss_of(ps, rank, 1.0, rank == 1 ? std::vector<size_t>{1, 0} : std::vector<size_t>{0, 1});
  EXPECT_THROW(loss.backward(), CommError);
  EXPECT_NO_THROW(group->barrier()->wait()) << "the group stays usable";
}

// Parameters named in launch_in_finalize get buckets of their own that no hook launches: p1 and
// p2 would share a bucket, but p1 is held, so buckets are {p3}, {p2}, {p1}, {p0}; three launch
// during backward, p1's only from finalize() — and every sum is still the closed form.
TEST(GradReducer, HeldBucketsLaunchOnlyFromFinalize) {
  const int rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = 16384;
  opt.bucket_bytes = 2 * 16384;
  opt.launch_in_finalize = {"p1"};
  GradReducer r(ps, world(), opt);
  ASSERT_EQ(r.num_buckets(), 4);
  EXPECT_EQ(r.bucket_names(1), (std::vector<std::string>{"p2"}));
  EXPECT_EQ(r.bucket_names(2), (std::vector<std::string>{"p1"}));
  r.zero_grad();
  r.set_sync(true);
  loss_of(ps, rank, 1.0).backward();
  std::vector<int64_t> from_hooks;
  for (const BucketLaunch& l : r.launches()) from_hooks.push_back(l.bucket);
  EXPECT_EQ(from_hooks, (std::vector<int64_t>{0, 1, 3})) << "the held bucket (2) launched from a hook";
  r.finalize();
  ASSERT_EQ(r.launches().size(), 4u);
  EXPECT_EQ(r.launches().back().bucket, 2);
  EXPECT_TRUE(r.launches().back().from_finalize);
  expect_sums(ps, {1.0}, 0.0);
  ReducerOptions unknown;
  unknown.launch_in_finalize = {"nope"};
  EXPECT_THROW(GradReducer(ps, world(), unknown), ValueError);
}

TEST(GradReducer, SkipHookDoesEverythingButTheCollective) {
  const int rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = opt.bucket_bytes = 16384;
  opt.comm_dtype = DType::bf16;
  opt.skip_collectives = true;
  GradReducer r(ps, world(), opt);
  EXPECT_TRUE(r.skips_comm());
  r.zero_grad();
  r.set_sync(true);
  loss_of(ps, rank, 1.0).backward();
  r.finalize();
  EXPECT_EQ(r.stats().buckets_launched, 4);
  EXPECT_EQ(r.stats().bytes, 0);
  // the local gradient, through the bf16 cast and back: integers ≤ 20, exact in bf16
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<double> g = ps[i].second.grad().to_double();
    for (int64_t j = 0; j < kSide * kSide; ++j) ASSERT_EQ(g[static_cast<size_t>(j)], coef(rank, i, j, 1.0));
  }
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
