// The flight recorder and the deadline diagnosis without ranks (label cpu): the ring keeps the
// last N entries oldest first and allocates nothing per operation; a report survives bytes and
// JSON; and diagnose() names the right rank on hand-made reports of the layouts' wait patterns —
// a pipeline chain ending at a silent rank (the neighbour that waits on it is not blamed), a
// stopped tensor-parallel peer, a skipped collective and two groups' collectives issued in
// different orders (every rank answering, waiting in a cycle).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>

#include "comm/communicator.h"
#include "comm/deadline_diagnosis.h"
#include "comm/flight_recorder.h"
#include "comm/flight_report.h"

// Counts every allocation of the process (the ring's steady state must make none). malloc/free
// underneath both: GCC cannot see that they pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<int64_t> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace st::comm {
namespace {

using State = WaitSnapshot::State;

FlightEntry collective(uint64_t seq, FlightOp op, int64_t count, int64_t tag = -1) {
  FlightEntry e;
  e.seq = seq;
  e.op = op;
  e.dtype = static_cast<int32_t>(DType::f32);
  e.arg = op == FlightOp::allreduce ? static_cast<int32_t>(ReduceOp::sum) : -1;
  e.count = count;
  e.bytes = 4 * count;
  e.tag = tag;
  e.enqueued_ns = e.started_ns = e.completed_ns = 1;
  return e;
}

TEST(FlightRecorder, KeepsTheLastEntriesOldestFirst) {
  FlightRecorder rec(256);
  for (uint64_t i = 0; i < 300; ++i) {
    FlightEntry e = collective(i, FlightOp::allreduce, static_cast<int64_t>(i));
    e.enqueued_ns = e.started_ns = e.completed_ns = 0;
    EXPECT_EQ(rec.record(e), i);
  }
  rec.mark_completed(10, 1, 77);   // overwritten long ago: left alone
  rec.mark_started(298, 2, 5);
  rec.mark_completed(299, 1, 9);
  rec.mark_completed(299, 1, 11);  // a time already set is kept
  std::vector<FlightEntry> s = rec.snapshot();
  ASSERT_EQ(s.size(), 256u);
  EXPECT_EQ(s.front().id, 44u);
  EXPECT_EQ(s.front().seq, 44u);
  EXPECT_EQ(s.back().id, 299u);
  EXPECT_EQ(s.back().count, 299);
  EXPECT_EQ(s.back().started_ns, 5);
  EXPECT_EQ(s.back().completed_ns, 9);
  EXPECT_EQ(s[254].started_ns, 5);
  EXPECT_EQ(s[254].completed_ns, 0);
  EXPECT_GT(s.front().enqueued_ns, 0) << "enqueued at record()";
  for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i].id, s[i - 1].id + 1);
}

TEST(FlightRecorder, RecordsWithoutAllocating) {
  FlightRecorder rec(256);
  const FlightEntry e = collective(0, FlightOp::allreduce, 4);
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 10000; ++i) {
    const uint64_t id = rec.record(e);
    rec.mark_started(id, 1, 1 + i);
    rec.mark_completed(id, 1, 2 + i);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

// A report of world rank `r` waiting (or timed out) in `op` seq `seq` of `group` on `peers`.
RankReport waiting(int r, const std::string& group, std::vector<int> members, const std::string& op, uint64_t seq,
                   bool collective_op, std::vector<WaitSnapshot::Peer> peers = {}, State st = State::waiting) {
  RankReport rep;
  rep.world_rank = r;
  rep.wait.state = st;
  rep.wait.group = group;
  rep.wait.members = std::move(members);
  rep.wait.op = op;
  rep.wait.seq = seq;
  rep.wait.collective = collective_op;
  rep.wait.peers = std::move(peers);
  return rep;
}

GroupReport group(const std::string& name, std::vector<int> members, int rank, uint64_t collectives,
                  std::vector<uint64_t> sends_to = {}, std::vector<uint64_t> recvs_from = {}) {
  GroupReport g;
  g.name = name;
  g.rank = rank;
  g.collectives = collectives;
  g.sends_to = sends_to.empty() ? std::vector<uint64_t>(members.size(), 0) : sends_to;
  g.recvs_from = recvs_from.empty() ? std::vector<uint64_t>(members.size(), 0) : recvs_from;
  g.members = std::move(members);
  return g;
}

TEST(FlightReport, SurvivesBytesAndJson) {
  RankReport r = waiting(1, "pp[dp=0,tp=0]", {0, 1, 2, 3}, "batch_p2p", 7, false, {{2, 0, 4}}, State::timed_out);
  r.host = "h\"1";
  r.pid = 42;
  GroupReport g = group("pp[dp=0,tp=0]", {0, 1, 2, 3}, 1, 3, {4, 0, 3, 0}, {3, 0, 4, 0});
  g.entries = {collective(2, FlightOp::barrier, 0), collective(3, FlightOp::allreduce, 8, 5)};
  FlightEntry p;
  p.seq = 7;
  p.op = FlightOp::recv;
  p.peer = 2;
  p.count = 16;
  p.bytes = 64;
  p.tag = 9;
  g.entries.push_back(p);
  r.groups = {g};
  const RankReport back = decode_report(encode_report(r));
  EXPECT_EQ(encode_report(back), encode_report(r));
  EXPECT_EQ(back.wait.describe(), "batch_p2p seq 7 in group 'pp[dp=0,tp=0]'");
  EXPECT_THROW(decode_report(encode_report(r).substr(3)), CommError);
  nlohmann::json j = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["host"], "h\"1");
  EXPECT_EQ(j["wait"]["state"], "timed_out");
  EXPECT_EQ(j["wait"]["peers"][0]["rank"], 2);
  EXPECT_EQ(j["groups"][0]["name"], "pp[dp=0,tp=0]");
  EXPECT_EQ(j["groups"][0]["entries"][1]["op"], "allreduce");
  EXPECT_EQ(j["groups"][0]["entries"][1]["reduce_op"], "sum");
  EXPECT_EQ(j["groups"][0]["entries"][1]["tag"], 5);
  EXPECT_EQ(j["groups"][0]["entries"][2]["op"], "recv");
  EXPECT_EQ(j["groups"][0]["entries"][2]["peer"], 2) << "peers as world ranks";
}

// pp 4, rank 2 stopped: rank 1 timed out on its receive from 2 and still answers; rank 0 waits on
// rank 1, which has not issued the send rank 0 waits for; rank 3 waits on 2. Rank 1 is not behind.
TEST(Diagnose, PipelineChainEndsAtTheSilentRank) {
  const std::vector<int> pp{0, 1, 2, 3};
  std::vector<std::optional<RankReport>> reps(4);
  reps[0] = waiting(0, "pp", pp, "batch_p2p", 9, false, {{1, 0, 5}});
  reps[0]->groups = {group("pp", pp, 0, 1, {0, 5, 0, 0}, {0, 5, 0, 0})};
  reps[1] = waiting(1, "pp", pp, "batch_p2p", 8, false, {{2, 5, 5}}, State::timed_out);
  reps[1]->groups = {group("pp", pp, 1, 1, {4, 0, 5, 0}, {5, 0, 5, 0})};
  reps[3] = waiting(3, "pp", pp, "recv", 4, false, {{2, 0, 5}});
  reps[3]->groups = {group("pp", pp, 3, 1, {0, 0, 4, 0}, {0, 0, 5, 0})};
  const Diagnosis d = diagnose(reps, Millis(2000));
  EXPECT_EQ(d.behind, std::vector<int>{2}) << d.line;
  EXPECT_EQ(d.line.rfind("comm deadline: rank 2 is behind: no answer on the side channel within 2.0 s", 0), 0u)
      << d.line;
  EXPECT_NE(d.line.find("rank 0 in batch_p2p seq 9 of 'pp' on rank 1"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("rank 1 timed out in batch_p2p seq 8 of 'pp' on rank 2"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("rank 2 gave no answer"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("First divergence: none"), std::string::npos) << d.line;
  EXPECT_EQ(d.line.find('\n'), std::string::npos);
  // Had rank 1 stopped answering after its own deadline, it would look stopped too: the reason
  // ranks keep answering until the job ends (comm/deadline_gather.h).
  reps[1].reset();
  EXPECT_EQ(diagnose(reps, Millis(2000)).behind, (std::vector<int>{1, 2}));
}

// dp 2 x tp 2 (tp {0,1} {2,3}, dp {0,2} {1,3}), rank 3 stopped: rank 2 waits in its tp
// all-reduce on 3, rank 1 in its dp all-reduce on 3, rank 0 in its tp all-reduce on 1, which
// issued it but waits in the dp group: followed to rank 3.
TEST(Diagnose, TensorAndDataParallelFollowTheWaitsToTheStoppedRank) {
  std::vector<std::optional<RankReport>> reps(4);
  reps[0] = waiting(0, "tp0", {0, 1}, "allreduce", 6, true);
  reps[0]->groups = {group("tp0", {0, 1}, 0, 7), group("dp0", {0, 2}, 0, 3)};
  reps[1] = waiting(1, "dp1", {1, 3}, "allreduce", 3, true);
  reps[1]->groups = {group("tp0", {0, 1}, 1, 7), group("dp1", {1, 3}, 0, 4)};
  reps[2] = waiting(2, "tp1", {2, 3}, "allreduce", 6, true);
  reps[2]->groups = {group("tp1", {2, 3}, 0, 7), group("dp0", {0, 2}, 1, 3)};
  const Diagnosis d = diagnose(reps, Millis(1000));
  EXPECT_EQ(d.behind, std::vector<int>{3}) << d.line;
  EXPECT_NE(d.line.find("ranks 1,2 wait on it"), std::string::npos) << d.line;
}

// Every rank answers. Rank 1 skipped allreduce tag 1 (world seq 1): MPI matched its tag 2 there,
// the others wait in seq 2, which rank 1 never issues (it waits in a barrier of 'other').
TEST(Diagnose, SkippedCollectiveNamesTheRankAndTheFirstDivergingSeq) {
  const std::vector<int> w{0, 1, 2};
  std::vector<std::optional<RankReport>> reps(3);
  for (int r : {0, 2}) {
    reps[r] = waiting(r, "world", w, "allreduce", 2, true);
    GroupReport g = group("world", w, r, 3);
    g.entries = {collective(0, FlightOp::allreduce, 4, 0), collective(1, FlightOp::allreduce, 4, 1),
                 collective(2, FlightOp::allreduce, 4, 2)};
    reps[r]->groups = {g, group("other", w, r, 0)};
  }
  reps[1] = waiting(1, "other", w, "barrier", 0, true);
  GroupReport g1 = group("world", w, 1, 2);
  g1.entries = {collective(0, FlightOp::allreduce, 4, 0), collective(1, FlightOp::allreduce, 4, 2)};
  reps[1]->groups = {g1, group("other", w, 1, 1)};
  const Diagnosis d = diagnose(reps, Millis(1000));
  EXPECT_EQ(d.behind, std::vector<int>{1}) << d.line;
  EXPECT_EQ(d.divergence,
            "group 'world' seq 1: ranks 0,2 allreduce(sum) f32 x4 tag 1; rank 1 allreduce(sum) f32 x4 tag 2");
  // without caller tags the signatures agree: still rank 1, the one that has not issued seq 2
  for (auto& r : reps)
    for (auto& e : r->groups[0].entries) e.tag = -1;
  const Diagnosis u = diagnose(reps, Millis(1000));
  EXPECT_EQ(u.behind, std::vector<int>{1}) << u.line;
}

// Rank 1 issued group b's all-reduce before a's, the others a's first: every rank waits on another.
TEST(Diagnose, TwoGroupsInAnotherOrderNameTheRankThatSwapped) {
  const std::vector<int> w{0, 1, 2};
  std::vector<std::optional<RankReport>> reps(3);
  for (int r : {0, 2}) {
    reps[r] = waiting(r, "a", w, "allreduce", 1, true);
    reps[r]->groups = {group("a", w, r, 2), group("b", w, r, 0)};
  }
  reps[1] = waiting(1, "b", w, "allreduce", 0, true);
  reps[1]->groups = {group("a", w, 1, 1), group("b", w, 1, 1)};
  const Diagnosis d = diagnose(reps, Millis(1000));
  EXPECT_EQ(d.behind, std::vector<int>{1}) << d.line;
  EXPECT_EQ(d.divergence,
            "rank 0 waits in allreduce seq 1 of 'a', which rank 1 has not issued, while rank 1 waits in allreduce "
            "seq 0 of 'b', which rank 0 has not issued: the two groups' collectives were issued in different orders");
}

}  // namespace
}  // namespace st::comm
