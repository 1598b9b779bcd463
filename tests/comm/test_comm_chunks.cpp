// Operations above max_count() elements are split into several backend calls (communicator.h,
// "Sizes"; comm/communicator_chunks.cpp). A communicator created with CommOptions::max_count = 3
// runs every op on sizes that are not multiples of 3 (and one below it), every dtype, in place
// and out of place, and must give exactly what the unsplit communicator gives — and the closed
// form (integer values: exact in every dtype, so the order of summation cannot matter).
// test_comm runs this in both p2p modes (default and strict), on every backend available.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

constexpr int64_t kMax = 3;

class Chunks : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    whole = make_world(GetParam(), "whole");
    CommOptions o = testing_support::test_comm_options();
    o.max_count = kMax;
    split = make_world(GetParam(), "split", o);
    ASSERT_EQ(split->max_count(), kMax);
    ASSERT_EQ(whole->max_count(), INT_MAX);
    N = whole->size();
    R = whole->rank();
    dev = backend_device(GetParam());
  }
  Tensor T(const std::vector<double>& v, DType t) const { return make_tensor(v, t, dev); }
  // Runs `op` on both communicators (fresh inputs each time) and returns both results.
  template <class Op>
  std::pair<std::vector<double>, std::vector<double>> both(Op&& op) {
    return {op(*whole), op(*split)};
  }
  std::shared_ptr<Communicator> whole, split;
  int N = 0, R = 0;
  Device dev = Device::cpu;
};

const std::vector<int64_t> kSizes = {2, 5, 7, 10};  // below, between and above multiples of 3

std::vector<double> ramp(int64_t n, double base) {
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = base + static_cast<double>(i % 11);
  return x;
}

TEST_P(Chunks, AllReduceAndReduce) {
  for (DType dt : all_dtypes())
    for (int64_t n : kSizes)
      for (bool in_place : {false, true}) {
        const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n) + (in_place ? " in place" : "");
        // all-reduce of R + (i mod 11): N(N−1)/2 + N·(i mod 11)
        auto [a, b] = both([&](Communicator& c) {
          Tensor in = T(ramp(n, R), dt), out = in_place ? in : Tensor::zeros({n}, dt, dev);
          WorkPtr w = c.all_reduce(in, out);
          EXPECT_EQ(w->op(), "allreduce");
          w->wait();
          EXPECT_EQ(in.to_double(), in_place ? out.to_double() : ramp(n, R)) << what;
          return out.to_double();
        });
        EXPECT_EQ(b, a) << what;
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(b[i], N * (N - 1) / 2.0 + N * (i % 11)) << what << " i=" << i;
        // max, and reduce to the last rank (the others' out keeps its fill −1)
        auto [m1, m2] = both([&](Communicator& c) {
          Tensor t = T(ramp(n, (R + 1) % N), dt);
          c.all_reduce(t, ReduceOp::max)->wait();
          return t.to_double();
        });
        EXPECT_EQ(m2, m1) << what;
        EXPECT_EQ(m2, ramp(n, N - 1)) << what;
        auto [r1, r2] = both([&](Communicator& c) {
          Tensor in = T(ramp(n, R), dt), out = in_place ? in : Tensor::full({n}, -1.0, dt, dev);
          c.reduce(in, out, N - 1)->wait();
          return out.to_double();
        });
        EXPECT_EQ(r2, r1) << what;
        for (int64_t i = 0; i < n; ++i)
          EXPECT_EQ(r2[i], R == N - 1 ? N * (N - 1) / 2.0 + N * (i % 11) : in_place ? R + i % 11 : -1.0)
              << what << " reduce i=" << i;
      }
}

// in[j] = 10·rank + (j mod 11) (j < N·n) → rank r's out[k] = 10·N(N−1)/2 + N·((r·n + k) mod 11).
TEST_P(Chunks, ReduceScatterAndAllGather) {
  for (DType dt : all_dtypes())
    for (int64_t n : kSizes)
      for (bool in_place : {false, true}) {
        const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n) + (in_place ? " in place" : "");
        auto [a, b] = both([&](Communicator& c) {
          Tensor in = T(ramp(N * n, 10.0 * R), dt);
          Tensor out = in_place ? in.narrow(0, R * n, n) : Tensor::zeros({n}, dt, dev);
          WorkPtr w = c.reduce_scatter(in, out);
          EXPECT_EQ(w->op(), "reduce_scatter");
          w->wait();
          return out.to_double();
        });
        EXPECT_EQ(b, a) << what;
        for (int64_t k = 0; k < n; ++k)
          EXPECT_EQ(b[k], 10.0 * N * (N - 1) / 2 + N * ((R * n + k) % 11)) << what << " reduce_scatter k=" << k;
        if (is_floating(dt)) {  // avg: 5(N−1) + ((r·n + k) mod 11)
          auto [v1, v2] = both([&](Communicator& c) {
            Tensor out = Tensor::zeros({n}, dt, dev);
            c.reduce_scatter(T(ramp(N * n, 10.0 * R), dt), out, ReduceOp::avg)->wait();
            return out.to_double();
          });
          EXPECT_EQ(v2, v1) << what;
          for (int64_t k = 0; k < n; ++k) EXPECT_EQ(v2[k], 5.0 * (N - 1) + (R * n + k) % 11) << what << " avg k=" << k;
        }
        // all-gather of 10·rank + (k mod 11): out[r·n + k] = 10·r + (k mod 11)
        auto [g1, g2] = both([&](Communicator& c) {
          Tensor out = Tensor::full({N * n}, -1.0, dt, dev);
          Tensor in = T(ramp(n, 10.0 * R), dt);
          if (in_place) {
            in = out.narrow(0, R * n, n);
            in.copy_(T(ramp(n, 10.0 * R), dt));
          }
          WorkPtr w = c.all_gather(in, out);
          EXPECT_EQ(w->op(), "all_gather");
          w->wait();
          return out.to_double();
        });
        EXPECT_EQ(g2, g1) << what;
        for (int r = 0; r < N; ++r)
          for (int64_t k = 0; k < n; ++k) EXPECT_EQ(g2[r * n + k], 10.0 * r + k % 11) << what << " all_gather r=" << r;
      }
}

TEST_P(Chunks, BroadcastAndPointToPoint) {
  const int next = (R + 1) % N, prev = (R + N - 1) % N;
  for (DType dt : all_dtypes())
    for (int64_t n : kSizes) {
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      for (int root : {0, N - 1}) {
        auto [a, b] = both([&](Communicator& c) {
          Tensor t = R == root ? T(ramp(n, 10.0 * root), dt) : Tensor::zeros({n}, dt, dev);
          c.broadcast(t, root)->wait();
          return t.to_double();
        });
        EXPECT_EQ(b, a) << what << " root " << root;
        EXPECT_EQ(b, ramp(n, 10.0 * root)) << what << " root " << root;
      }
      // A ring in one batch, two transfers per direction (tags 1 and 2) of n elements each.
      auto [p1, p2] = both([&](Communicator& c) {
        Tensor s1 = T(ramp(n, 10.0 * R), dt), s2 = T(ramp(n, 100.0 + R), dt);
        Tensor r1 = Tensor::zeros({n}, dt, dev), r2 = Tensor::zeros({n}, dt, dev);
        c.batch_p2p({P2POp::send(s1, next, 1), P2POp::send(s2, next, 2), P2POp::recv(r1, prev, 1),
                     P2POp::recv(r2, prev, 2)})
            ->wait();
        std::vector<double> got = r1.to_double(), got2 = r2.to_double();
        got.insert(got.end(), got2.begin(), got2.end());
        return got;
      });
      EXPECT_EQ(p2, p1) << what;
      std::vector<double> want = ramp(n, 10.0 * prev), want2 = ramp(n, 100.0 + prev);
      want.insert(want.end(), want2.begin(), want2.end());
      EXPECT_EQ(p2, want) << what << " p2p";
    }
}

// A split operation is one Work: one sequence number, one op name, wait_on_stream over its parts.
TEST_P(Chunks, OneWorkPerOperation) {
  Tensor t = T(ramp(10, R), DType::f32);
  WorkPtr a = split->all_reduce(t);
  WorkPtr b = split->barrier();
  EXPECT_EQ(a->seq() + 1, b->seq());
  a->wait_on_stream();
  b->wait();
  a->wait();
  EXPECT_EQ(t.to_double()[9], N * (N - 1) / 2.0 + N * 9);
}

INSTANTIATE_TEST_SUITE_P(Backends, Chunks, ::testing::ValuesIn(test_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace st::comm::test
