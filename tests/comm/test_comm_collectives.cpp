// Collectives against closed forms, for every dtype, in place and out of place, on every backend
// this build and machine offer (MPI always; NCCL where each rank has a GPU); reduce to a root;
// wait_on_stream.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

class Collectives : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    world = make_world(GetParam());
    N = world->size();
    R = world->rank();
    dev = backend_device(GetParam());
  }
  Tensor T(const std::vector<double>& v, DType t) const { return make_tensor(v, t, dev); }
  std::shared_ptr<Communicator> world;
  int N = 0, R = 0;
  Device dev = Device::cpu;
};

constexpr int kN = 7;  // elements per tensor

// x_i = rank + i  →  Σ = N(N−1)/2 + N·i (exact in every dtype for N ≤ 4).
TEST_P(Collectives, AllReduceSumEveryDtypeInPlaceAndOut) {
  for (DType dt : all_dtypes()) {
    std::vector<double> x(kN);
    for (int i = 0; i < kN; ++i) x[i] = R + i;
    Tensor a = T(x, dt);
    Tensor in = T(x, dt), out = Tensor::zeros({kN}, dt, dev);
    world->all_reduce(a)->wait();
    world->all_reduce(in, out)->wait();
    std::vector<double> got_a = a.to_double(), got_out = out.to_double(), got_in = in.to_double();
    for (int i = 0; i < kN; ++i) {
      double want = N * (N - 1) / 2.0 + N * i;
      EXPECT_EQ(got_a[i], want) << dtype_name(dt) << " in place, i=" << i;
      EXPECT_EQ(got_out[i], want) << dtype_name(dt) << " out of place, i=" << i;
      EXPECT_EQ(got_in[i], x[i]) << dtype_name(dt) << " input untouched";
    }
  }
}

// avg: (N−1)/2 + i; max of a rotated value ((r+1) mod N) + i: N − 1 + i.
TEST_P(Collectives, AllReduceAvgAndMax) {
  for (DType dt : all_dtypes()) {
    std::vector<double> x(kN), y(kN);
    for (int i = 0; i < kN; ++i) {
      x[i] = R + i;
      y[i] = (R + 1) % N + i;
    }
    Tensor m = T(y, dt);
    world->all_reduce(m, ReduceOp::max)->wait();
    for (int i = 0; i < kN; ++i) EXPECT_EQ(m.to_double()[i], N - 1 + i) << dtype_name(dt);
    if (!is_floating(dt)) {
      EXPECT_THROW(world->all_reduce(T(x, dt), ReduceOp::avg), DTypeError);
      continue;
    }
    Tensor a = T(x, dt), out = Tensor::zeros({kN}, dt, dev);
    world->all_reduce(a, out, ReduceOp::avg)->wait();
    for (int i = 0; i < kN; ++i) EXPECT_EQ(out.to_double()[i], (N - 1) / 2.0 + i) << dtype_name(dt);
  }
}

// reduce to roots 0 and N−1 with x_i = rank + i (max: ((rank + 1) mod N) + i): the root's out
// holds Σ = N(N−1)/2 + N·i (avg (N−1)/2 + i, max N − 1 + i; exact in every dtype for N ≤ 4), its
// in is untouched unless in place; every other rank's out keeps what it held (its fill, or its
// own input when in place).
TEST_P(Collectives, ReduceToRootEveryDtypeInPlaceAndOut) {
  for (DType dt : all_dtypes()) {
    for (int root : {0, N - 1}) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          std::vector<double> x(kN);
          for (int i = 0; i < kN; ++i) x[i] = (op == ReduceOp::max ? (R + 1) % N : R) + i;
          if (op == ReduceOp::avg && !is_floating(dt)) {
            EXPECT_THROW(world->reduce(T(x, dt), T(x, dt), root, op), DTypeError);
            continue;
          }
          Tensor in = T(x, dt);
          Tensor out = in_place ? in : Tensor::full({kN}, -1.0, dt, dev);
          WorkPtr w = world->reduce(in, out, root, op);
          EXPECT_EQ(w->op(), "reduce");
          w->wait();
          const std::vector<double> got = out.to_double(), got_in = in.to_double();
          const std::string what = std::string(dtype_name(dt)) + " " + reduce_op_name(op) + " root " +
                                   std::to_string(root) + (in_place ? " in place" : " out of place");
          for (int i = 0; i < kN; ++i) {
            const double want = op == ReduceOp::sum   ? N * (N - 1) / 2.0 + N * i
                                : op == ReduceOp::avg ? (N - 1) / 2.0 + i
                                                      : N - 1 + i;
            if (R == root) {
              EXPECT_EQ(got[i], want) << what << ", i=" << i;
              if (!in_place) {
                EXPECT_EQ(got_in[i], x[i]) << what << ": input untouched, i=" << i;
              }
            } else {
              EXPECT_EQ(got[i], in_place ? x[i] : -1.0) << what << ": a non-root's out was written, i=" << i;
            }
          }
        }
      }
    }
  }
  EXPECT_THROW(world->reduce(T({1, 2}, DType::f32), T({1, 2}, DType::f32), N), ValueError);
  EXPECT_THROW(world->reduce(T({1, 2}, DType::f32), T({1}, DType::f32), 0), ShapeError);
}

// in[j] = 10·rank + j (j < N·n); rank r gets out[k] = 10·N(N−1)/2 + N·(r·n + k).
TEST_P(Collectives, ReduceScatterLayout) {
  const int n = 3;
  for (DType dt : all_dtypes()) {
    for (bool in_place : {false, true}) {
      std::vector<double> x(N * n);
      for (int j = 0; j < N * n; ++j) x[j] = 10 * R + j;
      Tensor in = T(x, dt);
      Tensor out = in_place ? in.narrow(0, R * n, n) : Tensor::zeros({n}, dt, dev);
      world->reduce_scatter(in, out)->wait();
      std::vector<double> got = out.to_double();
      for (int k = 0; k < n; ++k)
        EXPECT_EQ(got[k], 10.0 * N * (N - 1) / 2 + N * (R * n + k)) << dtype_name(dt) << " in_place " << in_place;
    }
    if (is_floating(dt)) {  // avg: 5(N−1) + r·n + k
      std::vector<double> x(N * n);
      for (int j = 0; j < N * n; ++j) x[j] = 10 * R + j;
      Tensor out = Tensor::zeros({n}, dt, dev);
      world->reduce_scatter(T(x, dt), out, ReduceOp::avg)->wait();
      for (int k = 0; k < n; ++k) EXPECT_EQ(out.to_double()[k], 5.0 * (N - 1) + R * n + k) << dtype_name(dt);
    }
  }
}

// in[k] = 10·rank + k  →  out[r·n + k] = 10·r + k; in place when in is out's own chunk.
TEST_P(Collectives, AllGatherLayout) {
  const int n = 3;
  for (DType dt : all_dtypes()) {
    for (bool in_place : {false, true}) {
      std::vector<double> x(n);
      for (int k = 0; k < n; ++k) x[k] = 10 * R + k;
      Tensor out = Tensor::full({N * n}, -1.0, dt, dev);
      Tensor in = T(x, dt);
      if (in_place) {
        in = out.narrow(0, R * n, n);
        in.copy_(T(x, dt));
      }
      world->all_gather(in, out)->wait();
      std::vector<double> got = out.to_double();
      for (int r = 0; r < N; ++r)
        for (int k = 0; k < n; ++k)
          EXPECT_EQ(got[r * n + k], 10 * r + k) << dtype_name(dt) << " in_place " << in_place;
    }
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (DType dt : all_dtypes()) {
    for (int root = 0; root < N; ++root) {
      std::vector<double> x(kN);
      for (int i = 0; i < kN; ++i) x[i] = R == root ? 10 * root + i : 0;
      Tensor t = T(x, dt);
      world->broadcast(t, root)->wait();
      std::vector<double> got = t.to_double();
      for (int i = 0; i < kN; ++i) EXPECT_EQ(got[i], 10 * root + i) << dtype_name(dt) << " root " << root;
    }
  }
}

TEST_P(Collectives, WorkHandlesCarryOpAndSequence) {
  // Several operations in flight at once, on distinct buffers, waited for in reverse order.
  Tensor t = Tensor::ones({4}, DType::f32, dev), u = Tensor::full({4}, 2.0, DType::f32, dev);
  WorkPtr a = world->all_reduce(t);
  WorkPtr b = world->barrier();
  WorkPtr c = world->all_reduce(u);
  EXPECT_EQ(a->op(), "allreduce");
  EXPECT_EQ(b->op(), "barrier");
  EXPECT_EQ(a->seq() + 1, b->seq());
  EXPECT_EQ(b->seq() + 1, c->seq());
  c->wait();
  b->wait();
  a->wait();
  EXPECT_TRUE(a->is_completed());
  a->wait();  // a finished Work returns at once
  EXPECT_EQ(t.to_double()[0], 1.0 * N);
  EXPECT_EQ(u.to_double()[3], 2.0 * N);
  EXPECT_NE(a->describe().find("rank " + std::to_string(R)), std::string::npos);
  EXPECT_NE(a->describe().find("'world'"), std::string::npos);
  // A Work dropped unwaited finishes in its destructor: the result is in place afterwards.
  Tensor v = Tensor::full({3}, 1.0, DType::f32, dev);
  world->all_reduce(v);
  EXPECT_EQ(v.to_double()[2], 1.0 * N);
}

// Rank 0 sleeps 300 ms after a barrier, then joins; the others' wait() must not return earlier.
TEST_P(Collectives, WaitReallyWaits) {
  Tensor t = T(std::vector<double>(kN, R + 1), DType::f32);
  world->barrier()->wait();
  auto t0 = std::chrono::steady_clock::now();
  if (R == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  WorkPtr w = world->all_reduce(t);
  if (R != 0) {
    EXPECT_FALSE(w->is_completed());
  }
  w->wait();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 250.0) << "wait() returned before rank 0 joined";
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(t.to_double()[kN - 1], N * (N + 1) / 2.0);
}

// wait_on_stream(): rank 0 joins 300 ms late. Where the backend has no device-side wait (MPI,
// progresses_on_its_own() false) it is wait(): it returns only once the operation completed,
// with the sum in place. On NCCL it returns at once, and a read on the current stream (to_double)
// already sees the sum. Either way a wait() afterwards completes it.
TEST_P(Collectives, WaitOnStreamOrdersLaterStreamWork) {
  for (bool reduce_to_last : {false, true}) {
    Tensor t = T(std::vector<double>(kN, R + 1), DType::f32);
    world->barrier()->wait();
    if (R == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    WorkPtr w = reduce_to_last ? world->reduce(t, t, N - 1) : world->all_reduce(t);
    w->wait_on_stream();
    if (!world->progresses_on_its_own()) {
      EXPECT_TRUE(w->is_completed()) << "wait_on_stream returned before the operation completed";
    }
    const std::vector<double> got = t.to_double();  // on the current stream, after its wait
    w->wait();
    EXPECT_TRUE(w->is_completed());
    if (!reduce_to_last || R == N - 1) {
      EXPECT_EQ(got[kN - 1], N * (N + 1) / 2.0) << (reduce_to_last ? "reduce" : "allreduce");
    }
  }
}

TEST_P(Collectives, BrokenCommunicatorRefusesWork) {
  auto c = world->split(0, R, "doomed");
  ASSERT_TRUE(c);
  c->abort("test abort");
  EXPECT_TRUE(c->broken());
  try {
    c->all_reduce(Tensor::ones({1}, DType::f32, dev));
    ADD_FAILURE() << "no CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("broken: test abort"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::ValuesIn(test_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace st::comm::test
