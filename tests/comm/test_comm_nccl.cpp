// NCCL backend at world size 1 (label gpu; built only with NCCL, run on a machine with a GPU).
// The multi-rank NCCL runs are the mpi tests themselves: test_comm instantiates every collective
// and p2p case on NCCL wherever each rank has a GPU. Here: the plumbing (dtypes, layouts, in place
// and out of place), reduce, ordering against the compute stream by events, wait_on_stream (a
// device-side wait, the host not blocked), pooled events with operations in flight, split, abort,
// and auto choice.
#include <gtest/gtest.h>

#include "comm/make_communicator.h"
#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

TEST(NcclOneRank, AutoPicksNcclWithAGpuPerRank) {
  ASSERT_GE(nccl_visible_devices(), 1);
  CommSetup s = make_communicator("auto", kTestTimeout);
  EXPECT_EQ(s.backend, "nccl") << s.reason;
  EXPECT_EQ(s.reason.rfind("auto -> nccl: every rank owns a GPU", 0), 0u) << s.reason;
  EXPECT_EQ(s.device, 0);
  EXPECT_STREQ(s.world->backend(), "nccl");
}

TEST(NcclOneRank, EveryOpAndDtypeOnDeviceTensors) {
  auto c = make_world("nccl");
  ASSERT_EQ(c->size(), 1);
  for (DType dt : all_dtypes()) {
    std::vector<double> x{1, 2, 3, 4, 5, 6};
    Tensor in = make_tensor(x, dt, Device::cuda), out = Tensor::zeros({6}, dt, Device::cuda);
    c->all_reduce(in, out)->wait();
    EXPECT_EQ(out.to_double(), x) << dtype_name(dt);
    c->all_reduce(in, ReduceOp::max)->wait();
    EXPECT_EQ(in.to_double(), x) << dtype_name(dt);
    if (is_floating(dt)) {
      Tensor a = Tensor::zeros({6}, dt, Device::cuda);
      c->all_reduce(in, a, ReduceOp::avg)->wait();
      EXPECT_EQ(a.to_double(), x) << dtype_name(dt);
    }
    Tensor red = Tensor::full({6}, -1.0, dt, Device::cuda), own = make_tensor(x, dt, Device::cuda);
    c->reduce(in, red, 0)->wait();
    c->reduce(own, own, 0)->wait();  // in place
    EXPECT_EQ(red.to_double(), x) << dtype_name(dt);
    EXPECT_EQ(own.to_double(), x) << dtype_name(dt);
    Tensor g = Tensor::zeros({6}, dt, Device::cuda), rs = Tensor::zeros({6}, dt, Device::cuda);
    c->all_gather(in, g)->wait();
    c->reduce_scatter(in, rs)->wait();
    c->broadcast(in, 0)->wait();
    EXPECT_EQ(g.to_double(), x) << dtype_name(dt);
    EXPECT_EQ(rs.to_double(), x) << dtype_name(dt);
    EXPECT_EQ(in.to_double(), x) << dtype_name(dt);
  }
  c->barrier()->wait();
  EXPECT_THROW(c->all_reduce(Tensor::ones({2}, DType::f32, Device::cpu)), DeviceError);
}

// A large fill enqueued on the compute stream, then at once an out-of-place all-reduce on the comm
// stream: without the event wait the copy would read the old values.
TEST(NcclOneRank, CommStreamWaitsForComputeStream) {
  auto c = make_world("nccl");
  const int64_t n = 1 << 26;
  Tensor in = Tensor::zeros({n}, DType::f32, Device::cuda), out = Tensor::zeros({n}, DType::f32, Device::cuda);
  for (int rep = 1; rep <= 3; ++rep) {
    in.fill_(rep);  // asynchronous on the compute stream
    c->all_reduce(in, out)->wait();
    std::vector<float> v = out.to_float();
    EXPECT_EQ(v.front(), rep);
    EXPECT_EQ(v.back(), rep);
  }
}

// wait_on_stream: 200 fills of 256 MiB queued on the compute stream, then an out-of-place all-reduce
// of 256 MiB (ordered after them) and wait_on_stream. It returns while the operation is still
// queued (the host did not wait), and a clone enqueued right after on the compute stream reads
// the result: without the stream wait it would run beside the copy and read the old zeros.
TEST(NcclOneRank, WaitOnStreamIsADeviceSideWait) {
  auto c = make_world("nccl");
  const int64_t n = 1 << 26;
  Tensor slow = Tensor::zeros({n}, DType::f32, Device::cuda);
  Tensor in = Tensor::zeros({n}, DType::f32, Device::cuda), out = Tensor::zeros({n}, DType::f32, Device::cuda);
  for (int rep = 1; rep <= 3; ++rep) {
    out.fill_(0);
    in.fill_(rep);
    for (int i = 0; i < 200; ++i) slow.fill_(i);
    WorkPtr w = c->all_reduce(in, out);
    w->wait_on_stream();
    EXPECT_FALSE(w->is_completed()) << "wait_on_stream waited on the host";
    Tensor seen = out.clone();  // on the compute stream, behind the stream wait
    w->wait();
    std::vector<float> v = seen.to_float();
    EXPECT_EQ(v.front(), rep);
    EXPECT_EQ(v.back(), rep);
  }
  EXPECT_TRUE(c->progresses_on_its_own());
}

// Completion events are pooled and the ready event is re-recorded for every operation: several
// operations in flight at once, each ordered after its own fill on the compute stream, waited in
// reverse order, for many rounds (the pool's events are reused throughout). A Work dropped
// unwaited (its destructor waits) and one waited after its communicator was destroyed also end
// well.
TEST(NcclOneRank, EventsReusedWithOperationsInFlight) {
  auto c = make_world("nccl");
  const int64_t n = 1 << 22;
  std::vector<Tensor> in, out;
  for (int k = 0; k < 3; ++k) {
    in.push_back(Tensor::zeros({n}, DType::f32, Device::cuda));
    out.push_back(Tensor::zeros({n}, DType::f32, Device::cuda));
  }
  for (int round = 0; round < 50; ++round) {
    std::vector<WorkPtr> works;
    for (int k = 0; k < 3; ++k) {
      in[k].fill_(round * 10 + k);  // asynchronous: each op must see its own fill
      works.push_back(c->all_reduce(in[k], out[k]));
    }
    if (round % 5 == 4) works.push_back(c->all_reduce(in[0], ReduceOp::max));  // dropped below
    for (int k = 2; k >= 0; --k) works[k]->wait();
    for (int k = 0; k < 3; ++k) {
      std::vector<float> v = out[k].to_float();
      ASSERT_EQ(v.front(), round * 10 + k) << "round " << round << " op " << k;
      ASSERT_EQ(v.back(), round * 10 + k) << "round " << round << " op " << k;
    }
  }
  Tensor t = Tensor::full({n}, 3.0, DType::f32, Device::cuda);
  WorkPtr late = c->all_reduce(t);
  c.reset();  // finalizes the NCCL communicator: the operation is flushed
  late->wait();
  EXPECT_EQ(t.to_double().back(), 3.0);
}

TEST(NcclOneRank, SplitAndAbort) {
  auto c = make_world("nccl");
  auto child = c->split(0, 0, "child");
  ASSERT_TRUE(child);
  EXPECT_EQ(child->name(), "child");
  Tensor t = Tensor::full({4}, 2.0, DType::f32, Device::cuda);
  child->all_reduce(t)->wait();
  EXPECT_EQ(t.to_double()[3], 2.0);
  EXPECT_EQ(c->split(-1, 0), nullptr);
  child->abort("test abort");  // ncclCommAbort
  EXPECT_THROW(child->all_reduce(t), CommError);
  c->all_reduce(t)->wait();  // the parent is unaffected
  EXPECT_EQ(t.to_double()[0], 2.0);
}

}  // namespace
}  // namespace st::comm::test
