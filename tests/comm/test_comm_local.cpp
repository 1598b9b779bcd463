// Single-process pieces of comm/ (no ranks needed): the polling loop behind every deadline, the
// MPI environment defaults and the options' text forms (comm/comm_options.h).
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "comm/mpi_env.h"
#include "comm/poll.h"

namespace st::comm {
namespace {

using clock = std::chrono::steady_clock;

TEST(PollUntil, ReturnsTrueOnTheCallThatSucceeds) {
  int calls = 0;
  EXPECT_TRUE(poll_until(clock::now() + std::chrono::seconds(10), [&] { return ++calls == 5; }));
  EXPECT_EQ(calls, 5);
}

TEST(PollUntil, GivesUpAtTheDeadlineAfterPollingThroughIt) {
  // 30 ms: past the 1 ms spin, so the yielding phase runs; it polls until the deadline (no sleep
  // leaves it idle), then reports failure
  int calls = 0;
  const auto start = clock::now();
  EXPECT_FALSE(poll_until(start + std::chrono::milliseconds(30), [&] { return ++calls < 0; }));
  const auto waited = clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(30));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_GT(calls, 30) << "polled at least once a millisecond";
}

TEST(PollUntil, ADeadlineInThePastStillPollsOnce) {
  int calls = 0;
  EXPECT_TRUE(poll_until(clock::now() - std::chrono::seconds(1), [&] { return ++calls == 1; }));
  EXPECT_FALSE(poll_until(clock::now() - std::chrono::seconds(1), [&] { return false; }));
}

TEST(MpiEnv, RingAllReduceAndBinomialReduceUnlessTheUserChose) {
  for (auto [var, value] : {std::pair{"OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1"},
                            std::pair{"OMPI_MCA_coll_libnbc_ireduce_algorithm", "2"}}) {
    unsetenv(var);
    apply_mpi_defaults();
    ASSERT_NE(std::getenv(var), nullptr) << var;
    EXPECT_EQ(std::string(std::getenv(var)), value) << var;
    setenv(var, "3", 1);
    apply_mpi_defaults();
    EXPECT_EQ(std::string(std::getenv(var)), "3") << var << ": a value the user set is kept";
    unsetenv(var);
  }
}

TEST(CommOptions, MaxCountDefaultIsMpisIntLimitAndTheHookLowersIt) {
  const char* kVar = "SHARDTRAIN_COMM_MAX_COUNT";
  EXPECT_EQ(CommOptions{}.max_count, INT_MAX);
  EXPECT_EQ(parse_max_count("", kVar), INT_MAX);
  EXPECT_EQ(parse_max_count("3", kVar), 3);
  for (const char* bad : {"0", "-2", "3x", "abc", "2147483648"}) {
    try {
      parse_max_count(bad, kVar);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(kVar), std::string::npos) << e.what();
    }
  }
  CommOptions o;
  o.max_count = 0;
  EXPECT_THROW(o.validate(), ValueError);
  o.max_count = 3;
  EXPECT_NO_THROW(o.validate());
  o.flight_recorder_entries = -1;
  EXPECT_THROW(o.validate(), ValueError);
}

TEST(CommOptions, DebugAndCudaAwareTexts) {
  EXPECT_FALSE(parse_comm_debug("", "SHARDTRAIN_COMM_DEBUG"));
  EXPECT_FALSE(parse_comm_debug("0", "SHARDTRAIN_COMM_DEBUG"));
  EXPECT_TRUE(parse_comm_debug("1", "SHARDTRAIN_COMM_DEBUG"));
  EXPECT_TRUE(parse_comm_debug("yes", "SHARDTRAIN_COMM_DEBUG"));
  EXPECT_EQ(parse_cuda_aware("", "SHARDTRAIN_MPI_CUDA_AWARE"), CudaAwareMode::ask);
  EXPECT_EQ(parse_cuda_aware("0", "SHARDTRAIN_MPI_CUDA_AWARE"), CudaAwareMode::off);
  EXPECT_EQ(parse_cuda_aware("1", "SHARDTRAIN_MPI_CUDA_AWARE"), CudaAwareMode::on);
  EXPECT_THROW(parse_cuda_aware("yes", "SHARDTRAIN_MPI_CUDA_AWARE"), ValueError);
}

}  // namespace
}  // namespace st::comm
