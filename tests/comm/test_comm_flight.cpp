// The deadline diagnosis under mpirun -np 3 on the MPI backend (comm/deadline_gather.h): each test
// makes a communicator with the world's diagnoser (as make_communicator does) and a fault, and
// every rank whose deadline passes must get a DeadlineError that names the right rank, the same
// reporter (rank 0), and, for a program fault, the first diverging operation.
//  * SkippedCollective: rank 1 skips allreduce tag 1 (its tag 2 meets the others' tag 1 in MPI),
//    then waits in a barrier of another communicator; the others wait in seq 2, which it never
//    issues. Named: rank 1; divergence: seq 1, tag 1 against tag 2. The dump holds every rank's
//    ring as JSON, and rank 1's dump_flight_recorder its own afterwards.
//  * SwappedGroups: rank 1 issues group b's all-reduce before a's, the others a's first.
//  * PipelineChain: rank 2 sleeps (as a SIGSTOPped rank: no answer); rank 1 waits on a receive
//    from it and times out first, then keeps answering as launch/ does; rank 0, waiting on a
//    receive from rank 1, times out later — its diagnosis follows rank 1's wait to rank 2.
// How they end: the late or swapped rank issues what the others abandoned (MPI completes their
// posted requests while the final barrier polls); unmatched receives do not hold up MPI_Finalize.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/deadline_diagnosis.h"
#include "comm/deadline_gather.h"
#include "comm/flight_dump.h"
#include "comm/poll_hooks.h"
#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Communicator> diagnosed(const std::string& name, const CommOptions& o = {}) {
  auto c = MpiCommunicator::dup(MPI_COMM_WORLD, name, kTestTimeout, o);
  c->set_deadline_diagnoser(std::make_shared<DeadlineGather>(c->shared_state(), o));
  return c;
}

// Waits on `w`; returns its DeadlineError's diagnosis (fails when it completes or throws another).
std::optional<Diagnosis> deadline_of(const WorkPtr& w, int* reporter) {
  try {
    w->wait();
    ADD_FAILURE() << "wait() returned";
  } catch (const DeadlineError& e) {
    EXPECT_EQ(std::string(e.what()), e.diagnosis().line);
    EXPECT_EQ(e.timeout_line().rfind("comm timeout: ", 0), 0u) << e.timeout_line();
    *reporter = e.reporter();
    if (e.reports_here()) std::printf("[rank %d] %s\n", e.world_rank(), e.what());  // the job's one line
    return e.diagnosis();
  }
  return std::nullopt;
}

TEST(FlightDiagnosis, SkippedCollective) {
  ASSERT_EQ(world_size(), 3);
  const int R = world_rank();
  CommOptions o;
  o.flight_recorder_dump = std::string(ST_TEST_BINARY_DIR) + "/flight_skip";
  if (R == 0) fs::remove_all(o.flight_recorder_dump);
  MPI_Barrier(MPI_COMM_WORLD);
  auto c = diagnosed("skip", o);
  auto other = MpiCommunicator::dup(MPI_COMM_WORLD, "other", kTestTimeout);
  auto t = [] { return Tensor::ones({4}, DType::f32); };
  c->all_reduce(t(), ReduceOp::sum, {0})->wait();  // seq 0
  if (R == 1) {
    c->all_reduce(t(), ReduceOp::sum, {2})->wait();  // its seq 1, the others' tag 1
    other->barrier()->wait();                        // alive, answering; released after the diagnosis
    c->all_reduce(t(), ReduceOp::sum, {2})->wait();  // meets the others' abandoned seq 2
    // dump_flight_recorder: this rank's rings at any time
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dump_flight_recorder(o.flight_recorder_dump + "/now")));
    EXPECT_EQ(j["rank"], 1);
    for (const auto& g : j["groups"])
      if (g["name"] == "skip") {
        EXPECT_EQ(g["collectives_issued"], 3);
        ASSERT_EQ(g["entries"].size(), 3u);
        EXPECT_EQ(g["entries"][2]["tag"], 2);
        EXPECT_GT(g["entries"][2]["completed_ns"].get<int64_t>(), 0);
      }
    return;
  }
  c->set_timeout(Millis(1000));
  c->all_reduce(t(), ReduceOp::sum, {1})->wait();  // seq 1
  int reporter = -1;
  const auto d = deadline_of(c->all_reduce(t(), ReduceOp::sum, {2}), &reporter);  // seq 2
  ASSERT_TRUE(d);
  EXPECT_EQ(d->behind, std::vector<int>{1}) << d->line;
  EXPECT_EQ(reporter, 0);
  EXPECT_EQ(d->divergence,
            "group 'skip' seq 1: ranks 0,2 allreduce(sum) f32 x4 tag 1; rank 1 allreduce(sum) f32 x4 tag 2");
  EXPECT_NE(d->line.find("rank 1 in barrier seq 0 of 'other' on ranks 0,2"), std::string::npos) << d->line;
  if (R == 0) {
    // the reporter wrote every report it received and its own
    for (int r = 0; r < 3; ++r) {
      const fs::path p = fs::path(o.flight_recorder_dump) / ("flight_recorder_rank" + std::to_string(r) + ".json");
      ASSERT_TRUE(fs::exists(p)) << p;
      nlohmann::json j = nlohmann::json::parse(std::ifstream(p));
      EXPECT_EQ(j["rank"], r);
      bool found = false;
      for (const auto& g : j["groups"])
        if (g["name"] == "skip") {
          found = true;
          EXPECT_EQ(g["collectives_issued"], r == 1 ? 2 : 3) << p;
          EXPECT_EQ(g["entries"][1]["tag"], r == 1 ? 2 : 1) << p;
          EXPECT_GT(g["entries"][1]["completed_ns"].get<int64_t>(), g["entries"][1]["enqueued_ns"].get<int64_t>());
        }
      EXPECT_TRUE(found) << p;
    }
  }
  other->barrier()->wait();
}

TEST(FlightDiagnosis, SwappedGroups) {
  const int R = world_rank();
  auto a = diagnosed("a");
  auto b = a->split(0, R, "b");  // inherits the diagnoser
  auto t = [] { return Tensor::ones({4}, DType::f32); };
  if (R == 1) {
    b->all_reduce(t())->wait();  // b first: waits until the others gave up on a
    a->all_reduce(t())->wait();  // meets their abandoned a
    return;
  }
  a->set_timeout(Millis(1000));
  int reporter = -1;
  const auto d = deadline_of(a->all_reduce(t()), &reporter);  // a seq 1 (the split was seq 0)
  ASSERT_TRUE(d);
  EXPECT_EQ(d->behind, std::vector<int>{1}) << d->line;
  EXPECT_EQ(reporter, 0);
  EXPECT_EQ(d->divergence.rfind("rank 0 waits in allreduce seq 1 of 'a', which rank 1 has not issued, while rank 1 "
                                "waits in allreduce seq 0 of 'b', which rank 0 has not issued",
                                0),
            0u)
      << d->divergence;
  b->all_reduce(t())->wait();
}

TEST(FlightDiagnosis, PipelineChain) {
  const int R = world_rank();
  auto c = diagnosed("chain");
  Tensor x = Tensor::zeros({8}, DType::f32);
  if (R == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5500));  // silent past both diagnoses
    return;
  }
  c->set_timeout(Millis(R == 1 ? 500 : 1500));
  int reporter = -1;
  const auto d = deadline_of(c->recv(x, R + 1), &reporter);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->behind, std::vector<int>{2}) << d->line;
  EXPECT_EQ(reporter, 0);
  if (R == 1) run_poll_hooks_for(Millis(3500));  // answers rank 0, as launch/ does until the job ends
  if (R == 0) {
    EXPECT_NE(d->line.find("rank 0 in recv seq 0 of 'chain' on rank 1"), std::string::npos) << d->line;
    EXPECT_NE(d->line.find("rank 1 timed out in recv seq 0 of 'chain' on rank 2"), std::string::npos) << d->line;
  }
}

}  // namespace
}  // namespace st::comm::test
