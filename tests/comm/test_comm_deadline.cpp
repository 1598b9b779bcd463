// The watchdog. A rank that does not reach an all-reduce before a 1 s deadline: every other
// rank's wait() throws TimeoutError within deadline + side-channel window + slack, with one line
// that names the missing rank and the seq — the same line on every alive rank — and the
// communicator is broken afterwards.
//  * LateRankTimesOutTheOthers: rank 0 sleeps (computing, or SIGSTOPped): it never answers the
//    side channel, and is named "no answer".
//  * AliveRankIsNamedWithWhereItWaits: rank N-1 is alive but blocked in a barrier of another
//    communicator; it answers, so the line says where it is ("last seen at seq 0; waiting in
//    barrier seq 0 in group 'other'"). On a sub-group that leaves rank 1 out (N ≥ 3): ranks in
//    the line are world ranks.
//  * P2PPeerIsNamedWithWhatItLacks: rank 0's receive from rank 1 times out while rank 1, alive in
//    a barrier elsewhere, has not issued the send: the line says so.
// How the runs end cleanly: the late rank does join (with a longer deadline), and the others'
// abandoned requests stay posted with their buffers kept alive, so MPI completes the collective
// while every rank polls the final barrier in mpi_test_runner.cpp; then MPI_Finalize has nothing
// pending. (A rank that never joins cannot end cleanly under MPI: there launch/ calls MPI_Abort
// with the TimeoutError's message.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

using clock = std::chrono::steady_clock;

// Every rank in `alive` (world ranks, ascending) sends its line to alive[0], which checks that
// they are all the same (raw MPI on MPI_COMM_WORLD: the tested communicators are broken).
void expect_same_line_on(const std::vector<int>& alive, const std::string& line) {
  const int R = world_rank();
  if (R != alive[0]) {
    MPI_Send(line.data(), static_cast<int>(line.size()), MPI_CHAR, alive[0], 77, MPI_COMM_WORLD);
    return;
  }
  for (size_t i = 1; i < alive.size(); ++i) {
    MPI_Status st;
    MPI_Probe(alive[i], 77, MPI_COMM_WORLD, &st);
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string other(static_cast<size_t>(n), '\0');
    MPI_Recv(other.data(), n, MPI_CHAR, alive[i], 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(other, line) << "rank " << alive[i] << " named another cause than rank " << R;
  }
}

TEST(Watchdog, LateRankTimesOutTheOthers) {
  auto c = make_world("mpi", "deadline");
  const int N = c->size(), R = c->rank();
  c->set_timeout(Millis(1000));
  c->barrier()->wait();  // seq 0
  Tensor t = Tensor::full({16}, R + 1.0, DType::f32);
  if (R == 0) {
    // Past the others' deadline (1 s) and their side-channel window (min(5 s, 1 s)), with slack.
    std::this_thread::sleep_for(std::chrono::seconds(4));
    c->set_timeout(Millis(20000));
    WorkPtr w = c->all_reduce(t);  // seq 1
    w->wait();
    EXPECT_EQ(t.to_double()[0], N * (N + 1) / 2.0);
    EXPECT_FALSE(c->broken());
    return;
  }
  auto t0 = clock::now();
  WorkPtr w = c->all_reduce(t);  // seq 1
  std::string msg;
  try {
    w->wait();
    ADD_FAILURE() << "wait() returned although rank 0 was asleep";
  } catch (const TimeoutError& e) {
    msg = e.what();
  }
  double s = std::chrono::duration<double>(clock::now() - t0).count();
  EXPECT_GE(s, 1.0);
  EXPECT_LT(s, 11.0);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  const std::string members = N == 2 ? "0,1" : "0-" + std::to_string(N - 1);
  EXPECT_EQ(msg, "comm timeout: rank 0 did not reach allreduce seq 1 in group 'deadline' [ranks " + members +
                     "] within 1.0 s (no answer on the side channel within 1.0 s: busy outside comm, stopped or dead)");
  EXPECT_TRUE(c->broken());
  EXPECT_THROW(w->wait(), CommError);
  EXPECT_THROW(c->barrier(), CommError);
  std::vector<int> alive;
  for (int r = 1; r < N; ++r) alive.push_back(r);
  expect_same_line_on(alive, msg);
}

TEST(Watchdog, AliveRankIsNamedWithWhereItWaits) {
  auto world = make_world("mpi", "world");
  auto other = make_world("mpi", "other");
  const int N = world->size(), R = world->rank(), late = N - 1;
  const bool left_out = N >= 3 && R == 1;
  auto g = world->split(left_out ? -1 : 0, R, "named");  // world ranks {0, 2, ..., N-1} for N ≥ 3
  if (left_out) {
    ASSERT_EQ(g, nullptr);
    other->barrier()->wait();
    return;
  }
  g->set_timeout(Millis(1000));
  g->barrier()->wait();  // seq 0
  Tensor t = Tensor::full({4}, 1.0, DType::f32);
  if (R == late) {
    other->barrier()->wait();  // alive and polling: answers g's side channel from here
    g->set_timeout(Millis(20000));
    g->all_reduce(t)->wait();  // seq 1, joins what the others abandoned
    EXPECT_EQ(t.to_double()[0], g->size());
    return;
  }
  std::string msg;
  try {
    g->all_reduce(t)->wait();  // seq 1
    ADD_FAILURE() << "wait() returned although rank " << late << " waits elsewhere";
  } catch (const TimeoutError& e) {
    msg = e.what();
  }
  std::string members = N == 2 ? "0,1" : N == 3 ? "0,2" : "0,2,3";
  EXPECT_EQ(msg, "comm timeout: rank " + std::to_string(late) +
                     " did not reach allreduce seq 1 in group 'named' [ranks " + members +
                     "] within 1.0 s (last seen at seq 0; waiting in barrier seq 0 in group 'other')");
  std::vector<int> alive;
  for (int r = 0; r < late; ++r)
    if (!(N >= 3 && r == 1)) alive.push_back(r);
  expect_same_line_on(alive, msg);
  other->barrier()->wait();  // lets rank N-1 go on
}

TEST(Watchdog, P2PPeerIsNamedWithWhatItLacks) {
  auto c = make_world("mpi", "p2p");
  auto other = make_world("mpi", "other");
  const int R = c->rank();
  Tensor t = Tensor::full({4}, 1.0 + R, DType::f32);
  if (R == 1) {
    other->barrier()->wait();  // alive, answering; the send comes after
    c->send(t, 0, 5)->wait();  // matches rank 0's abandoned (still posted) receive
    return;
  }
  if (R == 0) {
    c->set_timeout(Millis(1000));
    std::string msg;
    try {
      c->recv(t, 1, 5)->wait();
      ADD_FAILURE() << "received although rank 1 has not sent";
    } catch (const TimeoutError& e) {
      msg = e.what();
    }
    const std::string members = c->size() == 2 ? "0,1" : "0-" + std::to_string(c->size() - 1);
    EXPECT_EQ(msg, "comm timeout: recv seq 0 of rank 0 in group 'p2p' [ranks " + members +
                       "] did not complete within 1.0 s: rank 1 has not issued the matching send (it issued 0 "
                       "sends to rank 0, this receive is number 1) and waits in barrier seq 0 in group 'other'");
  }
  other->barrier()->wait();
}

}  // namespace
}  // namespace st::comm::test
