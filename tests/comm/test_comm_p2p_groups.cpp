// Point-to-point (ring, batched both ways), process-grid sub-groups, f16/bf16 accuracy of the MPI
// backend, and debug-mode signature checks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/process_grid.h"
#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

class P2PGroups : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    world = make_world(GetParam());
    N = world->size();
    R = world->rank();
    dev = backend_device(GetParam());
  }
  std::shared_ptr<Communicator> world;
  int N = 0, R = 0;
  Device dev = Device::cpu;
};

// Each rank sends 10·rank + k to the next and receives from the previous, every dtype.
TEST_P(P2PGroups, Ring) {
  const int n = 5, next = (R + 1) % N, prev = (R + N - 1) % N;
  for (DType dt : all_dtypes()) {
    std::vector<double> x(n);
    for (int k = 0; k < n; ++k) x[k] = R * 10 + k;
    Tensor out = make_tensor(x, dt, dev), in = Tensor::zeros({n}, dt, dev);
    // Even ranks send first, odd ranks receive first: no cycle even on a backend whose sends
    // block their stream (NCCL); MPI's are nonblocking anyway.
    WorkPtr s, r;
    if (R % 2 == 0) {
      s = world->send(out, next, 7);
      r = world->recv(in, prev, 7);
    } else {
      r = world->recv(in, prev, 7);
      s = world->send(out, next, 7);
    }
    r->wait();
    s->wait();
    EXPECT_EQ(s->op(), "send");
    std::vector<double> got = in.to_double();
    for (int k = 0; k < n; ++k) EXPECT_EQ(got[k], prev * 10 + k) << dtype_name(dt);
  }
}

// Every rank sends 1M floats to both neighbours and receives from both in one batch: with blocking
// sends in a fixed order this pattern deadlocks (messages this large go by rendezvous).
TEST_P(P2PGroups, BatchedBothDirectionsAtOnce) {
  const int64_t n = 1 << 20;
  const int next = (R + 1) % N, prev = (R + N - 1) % N;
  Tensor to_next = Tensor::full({n}, 1000.0 + R, DType::f32, dev);
  Tensor to_prev = Tensor::full({n}, 2000.0 + R, DType::f32, dev);
  Tensor from_prev = Tensor::zeros({n}, DType::f32, dev), from_next = Tensor::zeros({n}, DType::f32, dev);
  // Tags tell the directions apart when prev == next (N = 2). Odd ranks put their receives
  // first: a different interleaving on neighbours, but the same order per pair of ranks (rank a's
  // k-th send to b is b's k-th receive from a, as NCCL and strict mode match them; at N = 2 the
  // tag-1 transfer comes first both ways).
  std::vector<P2POp> ops{P2POp::send(to_next, next, 1), P2POp::send(to_prev, prev, 2),
                         P2POp::recv(from_prev, prev, 1), P2POp::recv(from_next, next, 2)};
  if (R % 2) ops = {ops[2], ops[3], ops[0], ops[1]};
  WorkPtr w = world->batch_p2p(ops);
  EXPECT_EQ(w->op(), "batch_p2p");
  w->wait();
  std::vector<float> a = from_prev.to_float(), b = from_next.to_float();
  EXPECT_EQ(a.front(), 1000.0f + prev);
  EXPECT_EQ(a.back(), 1000.0f + prev);
  EXPECT_EQ(b.front(), 2000.0f + next);
  EXPECT_EQ(b.back(), 2000.0f + next);
}

// Sub-groups of a grid: 2×2 (and 1×2×2) for np 4, 1×N otherwise. An all-reduce of world ranks over
// each group equals the sum of that group's members as the layout arithmetic lists them.
TEST_P(P2PGroups, ProcessGridSubGroups) {
  std::vector<std::array<int, 3>> layouts{{1, N, 1}, {N, 1, 1}};
  if (N == 4) {
    layouts.push_back({2, 2, 1});
    layouts.push_back({1, 2, 2});
    layouts.push_back({2, 1, 2});
  }
  for (auto [dp, tp, pp] : layouts) {
    ProcessGrid g(world, dp, tp, pp);
    const GridLayout& L = g.layout();
    ASSERT_EQ(L.rank_of(g.coord()), R);
    struct Case {
      std::shared_ptr<Communicator> c;
      std::vector<int> members;
      int my_index;
    };
    for (const Case& cs : {Case{g.dp_group(), L.dp_group(R), g.coord().dp}, Case{g.tp_group(), L.tp_group(R), g.coord().tp},
                           Case{g.pp_group(), L.pp_group(R), g.coord().pp}}) {
      ASSERT_EQ(cs.c->size(), static_cast<int>(cs.members.size())) << L.str() << " " << cs.c->name();
      EXPECT_EQ(cs.c->rank(), cs.my_index) << cs.c->name();
      Tensor t = make_tensor({double(R), 1.0}, DType::i64, dev);
      cs.c->all_reduce(t)->wait();
      double want = 0;
      for (int m : cs.members) want += m;
      EXPECT_EQ(t.to_double()[0], want) << L.str() << " group " << cs.c->name();
      EXPECT_EQ(t.to_double()[1], cs.members.size());
    }
    // Pipeline neighbours: each stage sends its world rank to the next stage.
    Tensor mine = make_tensor({double(R)}, DType::f32, dev), got = Tensor::full({1}, -1.0, DType::f32, dev);
    std::vector<P2POp> ops;
    if (!g.is_last_stage()) ops.push_back(P2POp::send(mine, g.next_stage(), 3));
    if (!g.is_first_stage()) ops.push_back(P2POp::recv(got, g.prev_stage(), 3));
    g.pp_group()->batch_p2p(ops)->wait();
    EXPECT_EQ(got.to_double()[0], g.is_first_stage() ? -1.0 : g.prev_stage_world_rank()) << L.str();
  }
}

// The MPI backend reduces f16/bf16 in f32 and rounds once: rank 0 holds a big value B, every
// other rank 1. Rounding after each pairwise add would leave B (1 is below half an ulp of B);
// one rounding of the exact sum gives round(B + N − 1). Plus 4096 small values per rank, each
// compared with the correctly rounded exact sum.
TEST(MpiBackend, HalfPrecisionSumsAccumulateInF32) {
  auto world = make_world("mpi");
  const int N = world->size(), R = world->rank();
  for (DType dt : {DType::f16, DType::bf16}) {
    const double big = dt == DType::f16 ? 2048.0 : 256.0;  // ulp 2 at this magnitude
    Tensor t = make_tensor({R == 0 ? big : 1.0}, dt);
    world->all_reduce(t)->wait();
    double exact = big + (N - 1);
    double want = make_tensor({exact}, dt).to_double()[0];  // one rounding, to nearest even
    EXPECT_EQ(t.to_double()[0], want) << dtype_name(dt) << " N=" << N;
    if (N >= 3) {
      EXPECT_GT(t.to_double()[0], big) << "pairwise rounding would give " << big;
    }

    const int n = 4096;
    std::vector<double> x(n);
    for (int i = 0; i < n; ++i) x[i] = 1e-3 * (1 + (i * 7 + R * 13) % 61) * (i % 2 ? 1 : -0.37);
    Tensor s = make_tensor(x, dt);
    std::vector<double> mine = s.to_double();  // values as rounded to dt
    Tensor all = Tensor::zeros({N * n}, dt);
    world->all_gather(s, all)->wait();
    std::vector<double> every = all.to_double();
    world->all_reduce(s)->wait();
    std::vector<double> got = s.to_double();
    for (int i = 0; i < n; ++i) {
      double sum = 0;
      for (int r = 0; r < N; ++r) sum += every[r * n + i];
      double want_i = make_tensor({double(float(sum))}, dt).to_double()[0];
      ASSERT_EQ(got[i], want_i) << dtype_name(dt) << " element " << i;
    }
  }
}

// Debug mode (CommOptions::debug) compares (op, dtype, count, root, caller tag) before each
// collective and throws CommError on every rank instead of running a mismatched collective.
TEST_P(P2PGroups, DebugModeReportsMismatches) {
  CommOptions o = testing_support::test_comm_options();
  o.debug = true;
  auto c = make_world(GetParam(), "debugged", o);
  ASSERT_TRUE(c->debug_checks());
  Tensor t = Tensor::ones({R == 0 ? 5 : 4}, DType::f32, dev);
  try {
    c->all_reduce(t);
    ADD_FAILURE() << "count mismatch not reported";
  } catch (const CommError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 allreduce(sum) f32 x5"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 allreduce(sum) f32 x4"), std::string::npos) << m;
  }
  // Different ops: rank 0 gathers, the others reduce.
  Tensor a = Tensor::ones({2}, DType::f32, dev), big = Tensor::zeros({2 * N}, DType::f32, dev);
  try {
    if (R == 0)
      c->all_gather(a, big);
    else
      c->all_reduce(a, ReduceOp::max);
    ADD_FAILURE() << "op mismatch not reported";
  } catch (const CommError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0 all_gather f32 x2"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 allreduce(max) f32 x2"), std::string::npos) << m;
  }
  // Same op, dtype and count, different caller tags (the reducer's bucket indices), and reduces
  // to different roots.
  Tensor b = Tensor::ones({3}, DType::f32, dev);
  try {
    c->all_reduce(b, ReduceOp::sum, CallerTag{R == 0 ? 1 : 2});
    ADD_FAILURE() << "tag mismatch not reported";
  } catch (const CommError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0 allreduce(sum) f32 x3 seq 2 tag 1"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 allreduce(sum) f32 x3 seq 2 tag 2"), std::string::npos) << m;
  }
  try {
    c->reduce(b, b, R == 0 ? 0 : 1);
    ADD_FAILURE() << "root mismatch not reported";
  } catch (const CommError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0 reduce(sum, root 0) f32 x3"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 reduce(sum, root 1) f32 x3"), std::string::npos) << m;
  }
  c->all_reduce(b, ReduceOp::sum, CallerTag{7})->wait();  // equal tags pass
  EXPECT_EQ(b.to_double()[0], N);
  // Nothing was issued, so the group still works.
  Tensor ok = Tensor::ones({3}, DType::f32, dev);
  c->all_reduce(ok)->wait();
  EXPECT_EQ(ok.to_double()[2], N);
  EXPECT_FALSE(c->broken());
}

INSTANTIATE_TEST_SUITE_P(Backends, P2PGroups, ::testing::ValuesIn(test_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace st::comm::test
