// Point-to-point semantics per mode (CommOptions::p2p, comm/README.md "Point to point"): strict mode
// deadlocks — at the deadline — where NCCL deadlocks, and checks tags against the issue order;
// default mode keeps MPI's behaviour; a truncated receive is a CommError in both. Ranks 0 and 1
// take part, the others only create the communicators. Each test gives its mode in the options, so
// they mean the same under test_comm_np*_strict (the whole binary with SHARDTRAIN_P2P=strict).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

using clock = std::chrono::steady_clock;

// A world communicator with p2p mode `mode`.
std::shared_ptr<Communicator> make_world_p2p(const std::string& backend, P2PMode mode, const std::string& name) {
  CommOptions o;
  o.p2p = mode;
  return make_world(backend, name, o);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(P2PMode, GivenByTheOptionsAndInheritedBySplit) {
  // Under the _strict registration the binary's options say strict (tests/support/test_comm_options.h).
  const char* env = std::getenv("SHARDTRAIN_P2P");
  const bool strict_run = env && std::string(env) == "strict";
  EXPECT_EQ(make_world("mpi", "env")->p2p_mode(), strict_run ? P2PMode::strict : P2PMode::standard);
  EXPECT_EQ(make_world_p2p("mpi", P2PMode::standard, "default")->p2p_mode(), P2PMode::standard);
  auto strict = make_world_p2p("mpi", P2PMode::strict, "strict");
  EXPECT_EQ(strict->p2p_mode(), P2PMode::strict);
  auto child = strict->split(0, world_rank(), "child");
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->p2p_mode(), P2PMode::strict);
  EXPECT_EQ(child->options().max_count, strict->options().max_count);
  // the text forms (the CLI's environment variable; launch/comm_env.h)
  EXPECT_EQ(parse_p2p_mode("", "SHARDTRAIN_P2P"), P2PMode::standard);
  EXPECT_EQ(parse_p2p_mode("default", "SHARDTRAIN_P2P"), P2PMode::standard);
  EXPECT_EQ(parse_p2p_mode("strict", "SHARDTRAIN_P2P"), P2PMode::strict);
  try {
    parse_p2p_mode("loose", "SHARDTRAIN_P2P");
    ADD_FAILURE() << "SHARDTRAIN_P2P=loose accepted";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "SHARDTRAIN_P2P")) << e.what();
    EXPECT_TRUE(contains(e.what(), "'loose'")) << e.what();
  }
}

class P2PStrict : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // NCCL is strict by nature; the MPI backends are asked to be.
    c = make_world_p2p(GetParam(), P2PMode::strict, "strict");
    R = c->rank();
    dev = backend_device(GetParam());
  }
  std::shared_ptr<Communicator> c;
  int R = 0;
  Device dev = Device::cpu;
};

// The pipeline's bug: stage s issues send(act) then recv(grad) as two batch_p2p calls while stage
// s+1 issues send(grad) then recv(act). On NCCL each send waits for its receive, which is queued
// behind the peer's own send: a deadlock. Strict mode deadlocks the same way — and ends at the
// deadline with a TimeoutError that says why. (Default mode completes it: DefaultModeKeeps...)
TEST_P(P2PStrict, SendThenReceiveAsTwoCallsDeadlocksAtTheDeadline) {
  if (R > 1) return;
  const int peer = 1 - R;
  const bool nccl = GetParam() == "nccl";
  // MPI strict: any size (MPI_Issend). NCCL completes a send into the peer's connection buffers
  // (a few MB per channel) without its receive, so it gets far more than those hold: 128 MB.
  const int64_t n = nccl ? int64_t{1} << 25 : int64_t{1} << 20;
  Tensor mine = Tensor::full({n}, 1.0 + R, DType::f32, dev), theirs = Tensor::zeros({n}, DType::f32, dev);
  c->set_timeout(Millis(1000));
  const auto t0 = clock::now();
  WorkPtr s, r;
  std::string msg;
  try {
    s = c->send(mine, peer, R);       // seq 0: act (rank 0) or grad (rank 1)
    r = c->recv(theirs, peer, peer);  // seq 1
    r->wait();
    ADD_FAILURE() << "the receive completed although each send waits for a receive queued behind it";
  } catch (const TimeoutError& e) {  // NCCL may already time out enqueueing (ncclInProgress)
    msg = e.what();
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  // 1 s deadline, then at most min(5 s, 1 s) asking the peer; the rest is slack for a loaded machine.
  EXPECT_GE(secs, 1.0);
  EXPECT_LT(secs, 8.0);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_TRUE(c->broken());
  if (s) {
    EXPECT_THROW(s->wait(), CommError);
  }
  if (nccl) return;
  EXPECT_TRUE(contains(msg, "recv seq 1 of rank " + std::to_string(R) + " in group 'strict'")) << msg;
  // The peer answers the side channel: it issued the matching send and waits in its own receive.
  EXPECT_TRUE(contains(msg, "rank " + std::to_string(peer) + " issued the matching transfers and waits in recv seq 1"))
      << msg;
  EXPECT_TRUE(contains(msg, "queued behind send seq 0")) << msg;
}

// The same transfers in ONE batch_p2p complete in strict mode (NCCL: one group).
TEST_P(P2PStrict, SendAndReceiveInOneBatchComplete) {
  if (R > 1) return;
  const int peer = 1 - R;
  const int64_t n = 1 << 20;
  Tensor mine = Tensor::full({n}, 1.0 + R, DType::f32, dev), theirs = Tensor::zeros({n}, DType::f32, dev);
  c->batch_p2p({P2POp::send(mine, peer, R), P2POp::recv(theirs, peer, peer)})->wait();
  std::vector<float> got = theirs.to_float();
  EXPECT_EQ(got.front(), 1.0f + peer);
  EXPECT_EQ(got.back(), 1.0f + peer);
  // Several transfers to one peer match in issue order, across calls too.
  Tensor a = Tensor::full({3}, 10.0 + R, DType::f32, dev), b = Tensor::full({5}, 20.0 + R, DType::f32, dev);
  Tensor ga = Tensor::zeros({3}, DType::f32, dev), gb = Tensor::zeros({5}, DType::f32, dev);
  c->batch_p2p({P2POp::send(a, peer, 8), P2POp::recv(ga, peer, 8)})->wait();
  c->batch_p2p({P2POp::recv(gb, peer, 9), P2POp::send(b, peer, 9)})->wait();
  EXPECT_EQ(ga.to_float()[2], 10.0f + peer);
  EXPECT_EQ(gb.to_float()[4], 20.0f + peer);
  EXPECT_FALSE(c->broken());
}

// Rank 0 sends with tag 3; rank 1's next receive from rank 0 expects tag 4: on NCCL the payload
// would land in the wrong buffer. The receive fails with a CommError naming both ranks, both tags,
// the group, op and seq; the send completes.
TEST_P(P2PStrict, ReceiveWithAnotherTagInIssueOrderIsACommError) {
  if (R > 1) return;
  Tensor t = Tensor::full({4}, 7.0, DType::f32, dev);
  if (R == 0) {
    c->send(t, 1, 3)->wait();
    EXPECT_FALSE(c->broken());
    return;
  }
  try {
    c->recv(t, 0, 4)->wait();
    ADD_FAILURE() << "tag 3 accepted by a receive for tag 4";
  } catch (const TimeoutError& e) {
    ADD_FAILURE() << "timed out instead of reporting the tag: " << e.what();
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "rank 1 of " + std::to_string(c->size()) + " in group 'strict', op recv, seq 0")) << m;
    EXPECT_TRUE(contains(m, "p2p mismatch with rank 0")) << m;
    EXPECT_TRUE(contains(m, "expected tag 4 (4 x f32), got tag 3 (4 x f32)")) << m;
    EXPECT_TRUE(contains(m, "transfer 1 from rank 0 to rank 1")) << m;
  }
  EXPECT_TRUE(c->broken());
}

INSTANTIATE_TEST_SUITE_P(Backends, P2PStrict, ::testing::ValuesIn(test_backends()),
                         [](const auto& info) { return info.param; });

// Sizes in strict mode (MPI backends; NCCL may hang on a size mismatch before any check could
// run on its data, see comm/nccl/envelopes.h). A message longer than the buffer, with another
// tag: the receive names both tags and the truncation instead of MPI's error handler ending the
// job. A shorter one is a mismatch too (default mode accepts it, as MPI does).
TEST(P2PStrictMpi, LongerOrShorterMessagesAreMismatches) {
  auto longer = make_world_p2p("mpi", P2PMode::strict, "longer");
  auto shorter = make_world_p2p("mpi", P2PMode::strict, "shorter");
  const int R = longer->rank();
  if (R > 1) return;
  if (R == 0) {
    longer->send(Tensor::full({8}, 1.0, DType::f32), 1, 5)->wait();
    shorter->send(Tensor::full({2}, 1.0, DType::f32), 1, 6)->wait();
    return;
  }
  Tensor buf = Tensor::zeros({4}, DType::f32);
  try {
    longer->recv(buf, 0, 6)->wait();
    ADD_FAILURE() << "a longer message with another tag was accepted";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "expected tag 6 (4 x f32), got tag 5 (8 x f32, longer than the buffer: truncated)")) << m;
    EXPECT_TRUE(contains(m, "in group 'longer', op recv, seq 0")) << m;
  }
  try {
    shorter->recv(buf, 0, 6)->wait();
    ADD_FAILURE() << "a shorter message was accepted";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "expected tag 6 (4 x f32), got tag 6 (2 x f32)")) << e.what();
  }
}

// Default mode keeps MPI's behaviour: buffered sends and matching by (peer, tag), so the
// two-call pattern above completes (here with small messages, the case that passes on MPI and
// hangs on NCCL), and a receive may take a message shorter than its buffer.
TEST(P2PDefaultMpi, SendThenReceiveAsTwoCallsCompletes) {
  auto c = make_world_p2p("mpi", P2PMode::standard, "default");
  const int R = c->rank();
  if (R > 1) return;
  const int peer = 1 - R;
  Tensor mine = Tensor::full({16}, 1.0 + R, DType::f32), theirs = Tensor::zeros({16}, DType::f32);
  WorkPtr s = c->send(mine, peer, R);
  c->recv(theirs, peer, peer)->wait();
  s->wait();
  EXPECT_EQ(theirs.to_float()[15], 1.0f + peer);
  // Tags pick the receive, whatever the order (rank 0 sends tag 3 then 4, rank 1 takes 4 first).
  Tensor x = Tensor::full({2}, 3.0, DType::f32), y = Tensor::full({2}, 4.0, DType::f32);
  if (R == 0) {
    c->batch_p2p({P2POp::send(x, 1, 3), P2POp::send(y, 1, 4)})->wait();
  } else {
    Tensor got4 = Tensor::zeros({4}, DType::f32), got3 = Tensor::zeros({2}, DType::f32);
    c->batch_p2p({P2POp::recv(got4, 0, 4), P2POp::recv(got3, 0, 3)})->wait();
    EXPECT_EQ(got4.to_float()[1], 4.0f);  // 2 of its 4 elements written
    EXPECT_EQ(got3.to_float()[1], 3.0f);
  }
  EXPECT_FALSE(c->broken());
}

// A receive into a buffer smaller than the message (default mode): a CommError naming the cause
// (MPI_ERR_TRUNCATE), the peer, the tag and the buffer, not Open MPI's fatal error handler.
TEST(P2PDefaultMpi, TruncatedReceiveIsACommError) {
  auto c = make_world_p2p("mpi", P2PMode::standard, "truncate");
  const int R = c->rank();
  if (R > 1) return;
  if (R == 0) {
    c->send(Tensor::full({8}, 1.0, DType::f32), 1, 7)->wait();
    return;
  }
  try {
    c->recv(Tensor::zeros({4}, DType::f32), 0, 7)->wait();
    ADD_FAILURE() << "8 elements received into 4";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "MPI_ERR_TRUNCATE: message truncated")) << m;
    EXPECT_TRUE(contains(m, "op recv, seq 0, receive from rank 0 with tag 7 into 4 x f32 (the message holds 8)")) << m;
  }
  EXPECT_TRUE(c->broken());
}

}  // namespace
}  // namespace st::comm::test
