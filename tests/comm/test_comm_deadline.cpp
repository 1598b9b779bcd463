// The watchdog: rank 0 sleeps 3 s past a 1 s deadline before joining an all-reduce. Every other
// rank's wait() throws TimeoutError within deadline + 10 s, naming rank, group, op and sequence
// number, and the communicator is broken afterwards. How the run ends cleanly: rank 0 does join
// (with a longer deadline), and the others' abandoned requests stay posted with their buffers
// kept alive, so MPI completes the collective while every rank polls the final barrier in
// mpi_test_main.cpp; then MPI_Finalize has nothing pending. (A rank that never joins cannot end
// cleanly under MPI: there launch/ calls MPI_Abort with the TimeoutError's message.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

TEST(Watchdog, LateRankTimesOutTheOthers) {
  auto c = make_world("mpi", "deadline");
  const int N = c->size(), R = c->rank();
  c->set_timeout(Millis(1000));
  c->barrier()->wait();  // seq 0
  Tensor t = Tensor::full({16}, R + 1.0, DType::f32);
  if (R == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    c->set_timeout(Millis(20000));
    WorkPtr w = c->all_reduce(t);  // seq 1
    w->wait();
    EXPECT_EQ(t.to_double()[0], N * (N + 1) / 2.0);
    EXPECT_FALSE(c->broken());
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  WorkPtr w = c->all_reduce(t);  // seq 1
  std::string msg;
  try {
    w->wait();
    ADD_FAILURE() << "wait() returned although rank 0 was asleep";
  } catch (const TimeoutError& e) {
    msg = e.what();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 1.0);
  EXPECT_LT(s, 11.0);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_NE(msg.find("rank " + std::to_string(R) + " of " + std::to_string(N)), std::string::npos) << msg;
  EXPECT_NE(msg.find("group 'deadline'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op allreduce"), std::string::npos) << msg;
  EXPECT_NE(msg.find("seq 1"), std::string::npos) << msg;
  EXPECT_TRUE(c->broken());
  EXPECT_THROW(w->wait(), CommError);
  EXPECT_THROW(c->barrier(), CommError);
}

}  // namespace
}  // namespace st::comm::test
