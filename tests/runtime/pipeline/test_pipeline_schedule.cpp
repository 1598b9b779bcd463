// Pipeline schedules checked as data, for many (stages, micro-batches): every micro-batch is
// forwarded and backpropagated exactly once in a valid order, 1F1B bounds the in-flight
// micro-batches by p − s, and a simulation of all stages together (sends post at once, receives
// wait for their peer's send, consecutive communication actions form one batch) runs to the end
// without deadlock. The same simulation with unit stage times gives the bubble fraction, which
// must equal (p − 1)/(m + p − 1) for both schedules.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "runtime/pipeline/pipeline_schedule.h"
#include "tensor/error.h"

using namespace st::runtime;

namespace {

struct SimResult {
  bool deadlock = false;
  double makespan = 0;
  std::string where;
};

// Discrete-event simulation: Forward takes tf, Backward tb; communication is instantaneous.
SimResult simulate(const std::string& name, int p, int m, double tf = 1, double tb = 2) {
  std::vector<std::vector<PipeAction>> prog(p);
  for (int s = 0; s < p; ++s) prog[s] = make_schedule(parse_enum<Schedule>(name, "schedule"), s, p, m);
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0);
  // messages: (from, to, is_grad, mb) → time the message became available
  std::map<std::tuple<int, int, bool, int>, double> posted;
  SimResult r;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (pc[s] < prog[s].size()) {
        const PipeAction& a = prog[s][pc[s]];
        if (!is_comm(a.op)) {
          clock[s] += a.op == PipeOp::Forward ? tf : tb;
          ++pc[s];
          progress = true;
          continue;
        }
        // a batch of consecutive communication actions
        size_t end = pc[s];
        while (end < prog[s].size() && is_comm(prog[s][end].op)) ++end;
        for (size_t i = pc[s]; i < end; ++i) {  // post sends (idempotent)
          const PipeAction& c = prog[s][i];
          if (c.op == PipeOp::SendAct) posted.emplace(std::make_tuple(s, s + 1, false, c.micro), clock[s]);
          if (c.op == PipeOp::SendGrad) posted.emplace(std::make_tuple(s, s - 1, true, c.micro), clock[s]);
        }
        bool ready = true;
        double t = clock[s];
        for (size_t i = pc[s]; i < end; ++i) {
          const PipeAction& c = prog[s][i];
          std::tuple<int, int, bool, int> key;
          if (c.op == PipeOp::RecvAct)
            key = {s - 1, s, false, c.micro};
          else if (c.op == PipeOp::RecvGrad)
            key = {s + 1, s, true, c.micro};
          else
            continue;
          auto it = posted.find(key);
          if (it == posted.end()) {
            ready = false;
            break;
          }
          t = std::max(t, it->second);
        }
        if (!ready) break;
        clock[s] = t;
        pc[s] = end;
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (pc[s] < prog[s].size()) {
      r.deadlock = true;
      r.where = "stage " + std::to_string(s) + " stuck at action " + std::to_string(pc[s]) + " of " +
                to_string(prog[s]);
    }
    r.makespan = std::max(r.makespan, clock[s]);
  }
  return r;
}

void check_valid(const std::string& name, int s, int p, int m) {
  auto acts = make_schedule(parse_enum<Schedule>(name, "schedule"), s, p, m);
  SCOPED_TRACE(name + " stage " + std::to_string(s) + "/" + std::to_string(p) + " m=" + std::to_string(m) + ": " +
               to_string(acts));
  std::map<int, std::vector<PipeOp>> per_mb;
  int in_flight = 0, max_in_flight = 0;
  for (const PipeAction& a : acts) {
    ASSERT_GE(a.micro, 0);
    ASSERT_LT(a.micro, m);
    per_mb[a.micro].push_back(a.op);
    if (a.op == PipeOp::Forward) max_in_flight = std::max(max_in_flight, ++in_flight);
    if (a.op == PipeOp::Backward) --in_flight;
  }
  ASSERT_EQ(static_cast<int>(per_mb.size()), m);
  for (auto& [mb, ops] : per_mb) {
    std::vector<PipeOp> want;
    if (s > 0) want.push_back(PipeOp::RecvAct);
    want.push_back(PipeOp::Forward);
    if (s < p - 1) want.push_back(PipeOp::SendAct);
    if (s < p - 1) want.push_back(PipeOp::RecvGrad);
    want.push_back(PipeOp::Backward);
    if (s > 0) want.push_back(PipeOp::SendGrad);
    EXPECT_EQ(ops, want) << "micro-batch " << mb << " actions out of order or missing";
  }
  if (name == "1f1b") {
    EXPECT_LE(max_in_flight, p - s) << "in-flight bound";
    EXPECT_EQ(max_in_flight, std::min(p - s, m));
  } else {
    EXPECT_EQ(max_in_flight, m);  // gpipe holds every micro-batch
  }
}

}  // namespace

TEST(PipelineSchedule, EveryStageListIsValid) {
  for (const char* name : {"gpipe", "1f1b"})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 9; ++m)
        for (int s = 0; s < p; ++s) check_valid(name, s, p, m);
}

TEST(PipelineSchedule, OneFOneBSteadyStateAlternates) {
  // stage 0 of 4 with 8 micro-batches: 3 warm-up forwards, then F/B alternate, then 3 backwards
  auto acts = one_f_one_b_schedule(0, 4, 8);
  std::string compute;
  for (auto& a : acts)
    if (!is_comm(a.op)) compute += std::string(pipe_op_name(a.op)) + std::to_string(a.micro) + " ";
  EXPECT_EQ(compute, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  auto last = one_f_one_b_schedule(3, 4, 3);  // last stage: no warm-up
  EXPECT_EQ(to_string(last), "RA0 F0 B0 SG0 RA1 F1 B1 SG1 RA2 F2 B2 SG2");
}

TEST(PipelineSchedule, NoDeadlockForAnyShape) {
  for (const char* name : {"gpipe", "1f1b"})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 12; ++m) {
        SimResult r = simulate(name, p, m);
        EXPECT_FALSE(r.deadlock) << name << " p=" << p << " m=" << m << ": " << r.where;
      }
}

TEST(PipelineSchedule, BubbleMatchesTheory) {
  // Equal stages, F = 1, B = 2: makespan = (m + p − 1)(F + B) for both schedules, i.e. the
  // bubble fraction is (p − 1)/(m + p − 1).
  for (const char* name : {"gpipe", "1f1b"})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 10; ++m) {
        SimResult r = simulate(name, p, m);
        ASSERT_FALSE(r.deadlock);
        double bubble = 1.0 - m * 3.0 / r.makespan;
        EXPECT_NEAR(bubble, (p - 1.0) / (m + p - 1.0), 1e-12) << name << " p=" << p << " m=" << m;
      }
}

TEST(PipelineSchedule, BadArgumentsAreErrors) {
  EXPECT_THROW(parse_enum<Schedule>("zigzag", "schedule"), st::ValueError);
  EXPECT_THROW(make_schedule(Schedule::one_f_one_b, 2, 2, 2), st::ValueError);
  EXPECT_THROW(make_schedule(Schedule::gpipe, 0, 2, 0), st::ValueError);
}
