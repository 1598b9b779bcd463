// runtime/observe/trace: scopes nest and record nothing while disabled, part files of several ranks
// merge into one Chrome trace JSON with one pid per rank, named tracks and aligned clocks.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/observe/trace.h"
#include "tensor/error.h"

namespace fs = std::filesystem;
namespace tr = st::runtime::trace;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_trace_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void sleep_us(int us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

}  // namespace

TEST(Trace, DisabledRecordsNothing) {
  tr::start(0);
  tr::stop();
  { tr::Scope s("forward", "compute", 1); }
  tr::record("x", "comm", 0, 5);
  tr::mark("m", "comm");
  EXPECT_FALSE(tr::enabled());
  EXPECT_TRUE(tr::events().empty());
}

TEST(Trace, ScopesNestAndNameMicroBatches) {
  tr::start(2);
  {
    tr::Scope outer("step", "compute");
    sleep_us(200);
    {
      tr::Scope inner("forward", "compute", 3);
      sleep_us(500);
    }
    sleep_us(200);
  }
  tr::stop();
  auto ev = tr::events();
  ASSERT_EQ(ev.size(), 2u);
  // The inner scope ends first, so it is recorded first.
  EXPECT_EQ(ev[0].name, "forward mb3");
  EXPECT_EQ(ev[1].name, "step");
  EXPECT_EQ(ev[0].track, "compute");
  EXPECT_GE(ev[0].dur_us, 500);
  EXPECT_GE(ev[1].dur_us, 900);
  EXPECT_GE(ev[0].begin_us, ev[1].begin_us + 200);
  EXPECT_LE(ev[0].begin_us + ev[0].dur_us, ev[1].begin_us + ev[1].dur_us - 200);
  EXPECT_EQ(tr::rank(), 2);
}

TEST(Trace, PartsMergeIntoOneChromeTrace) {
  fs::path dir = temp_dir("merge");
  std::string path = (dir / "sub" / "trace.json").string();
  // Rank 0 starts first; rank 1 about 20 ms later (wall clock), so its events shift by >= 20 ms.
  tr::start(0);
  { tr::Scope a("forward", "compute", 0); sleep_us(300); }
  { tr::Scope b(std::string("allreduce bucket 0"), "comm"); sleep_us(300); }
  tr::stop();
  tr::write_part(path);
  int64_t wall0 = tr::wall_start_us();
  sleep_us(20000);
  tr::start(1);
  { tr::Scope a("backward", "compute", 1); sleep_us(300); }
  { tr::Scope c("adamw", "optimizer"); sleep_us(100); }
  { tr::Scope d("bubble", "custom-track"); }
  tr::stop();
  tr::write_part(path);
  int64_t wall1 = tr::wall_start_us();
  EXPECT_TRUE(fs::exists(tr::part_path(path, 0)));
  EXPECT_TRUE(fs::exists(tr::part_path(path, 1)));

  tr::merge_parts(path, 2);
  EXPECT_FALSE(fs::exists(tr::part_path(path, 0)));
  EXPECT_FALSE(fs::exists(tr::part_path(path, 1)));
  std::ifstream f(path);
  nlohmann::json doc = nlohmann::json::parse(f);  // throws (fails the test) if not valid JSON
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, int> x_per_pid;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<int, std::string> process_names;
  int64_t rank1_backward_ts = -1;
  for (const auto& e : doc["traceEvents"]) {
    int pid = e.at("pid").get<int>();
    if (e.at("ph") == "X") {
      ++x_per_pid[pid];
      EXPECT_GE(e.at("ts").get<int64_t>(), 0);
      EXPECT_GE(e.at("dur").get<int64_t>(), 0);
      if (e.at("name") == "backward mb1") rank1_backward_ts = e.at("ts").get<int64_t>();
      if (e.at("name") == "forward mb0") { EXPECT_EQ(pid, 0); EXPECT_EQ(e.at("tid").get<int>(), 1); }
      if (e.at("name") == "allreduce bucket 0") { EXPECT_EQ(pid, 0); EXPECT_EQ(e.at("tid").get<int>(), 2); }
      if (e.at("name") == "adamw") { EXPECT_EQ(pid, 1); EXPECT_EQ(e.at("tid").get<int>(), 3); }
      if (e.at("name") == "bubble") {
        EXPECT_EQ(e.at("tid").get<int>(), 5);
      }
    } else if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      thread_names[{pid, e.at("tid").get<int>()}] = e.at("args").at("name");
    } else if (e.at("ph") == "M" && e.at("name") == "process_name") {
      process_names[pid] = e.at("args").at("name");
    }
  }
  EXPECT_EQ(x_per_pid[0], 2);
  EXPECT_EQ(x_per_pid[1], 3);
  EXPECT_EQ(process_names[0], "rank 0");
  EXPECT_EQ(process_names[1], "rank 1");
  EXPECT_EQ((thread_names[{0, 2}]), "comm");
  EXPECT_EQ((thread_names[{1, 3}]), "optimizer");
  EXPECT_EQ((thread_names[{1, 5}]), "custom-track");
  // Rank 1's first event sits at its wall-clock offset from rank 0's start.
  EXPECT_GE(rank1_backward_ts, wall1 - wall0);
  EXPECT_LE(rank1_backward_ts, wall1 - wall0 + 5000);
  fs::remove_all(dir);
}

TEST(Trace, MergeNamesAMissingPart) {
  fs::path dir = temp_dir("missing");
  std::string path = (dir / "t.json").string();
  tr::start(0);
  tr::stop();
  tr::write_part(path);
  try {
    tr::merge_parts(path, 2);
    FAIL() << "expected IOError";
  } catch (const st::IOError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Lanes of one track: a span that overlaps the open one without nesting goes to the next lane.
TEST(Trace, OverlappingSpansGoToLanes) {
  //            [0, 100)  [50, 150)  [60, 80)  [120, 200)  [200, 210)  [0, 0)   [50, 150) again
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, 100},   {50, 150}, {60, 80}, {120, 200},
                                                          {200, 210}, {0, 0},    {50, 150}};
  // [60, 80) nests in [0, 100) (lane 0); [120, 200) overlaps [50, 150) in lane 1 and ends after
  // it, but lane 0 is free again at 120; the zero-length mark at 0 nests in [0, 100); the second
  // [50, 150) overlaps lane 0's [0, 100) and nests in lane 1's equal span
  EXPECT_EQ(tr::assign_lanes(spans), (std::vector<int>{0, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(tr::assign_lanes({{0, 10}, {2, 12}, {4, 14}, {6, 16}}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(tr::assign_lanes({{0, 10}, {0, 10}, {10, 20}}), (std::vector<int>{0, 0, 0}));
}

// The merged trace: on every thread the slices nest or are disjoint (what Perfetto needs to draw
// them), the overlapping all-reduces land on "comm" and "comm 1", nested ones stay on their track.
TEST(Trace, OverlappingEventsMergeOntoSubTracks) {
  fs::path dir = temp_dir("lanes");
  const std::string path = (dir / "t.json").string();
  tr::start(0);
  tr::record("step", "compute", 0, 1000);
  tr::record("forward mb0", "compute", 10, 400);          // nests in step
  tr::record("backward mb0", "compute", 400, 900);        // nests in step
  tr::record("allreduce bucket 0", "comm", 500, 800);     // in flight ...
  tr::record("allreduce bucket 1", "comm", 600, 950);     // ... together with bucket 0
  tr::record("allreduce bucket 2", "comm", 700, 1200);    // and with both
  tr::record("wait", "comm", 650, 900);  // overlaps bucket 0 (lane 0), nests in bucket 1 (lane 1)
  tr::stop();
  tr::write_part(path);
  tr::merge_parts(path, 1);
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::map<int, std::string> names;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> slices;
  std::map<std::string, int> tid_of_event;
  for (const auto& e : doc["traceEvents"]) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names[e.at("tid").get<int>()] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const int64_t ts = e.at("ts").get<int64_t>();
    slices[e.at("tid").get<int>()].emplace_back(ts, ts + e.at("dur").get<int64_t>());
    tid_of_event[e.at("name").get<std::string>()] = e.at("tid").get<int>();
  }
  for (auto& [tid, s] : slices)
    for (size_t i = 0; i < s.size(); ++i)
      for (size_t j = 0; j < s.size(); ++j) {
        if (i == j) continue;
        const auto [a0, a1] = s[i];
        const auto [b0, b1] = s[j];
        const bool disjoint = a1 <= b0 || b1 <= a0, a_in_b = b0 <= a0 && a1 <= b1, b_in_a = a0 <= b0 && b1 <= a1;
        EXPECT_TRUE(disjoint || a_in_b || b_in_a)
            << "thread " << names[tid] << ": [" << a0 << ", " << a1 << ") and [" << b0 << ", " << b1 << ") overlap";
      }
  EXPECT_EQ(names[tid_of_event["step"]], "compute");
  EXPECT_EQ(names[tid_of_event["forward mb0"]], "compute");
  EXPECT_EQ(names[tid_of_event["allreduce bucket 0"]], "comm");
  EXPECT_EQ(names[tid_of_event["allreduce bucket 1"]], "comm 1");
  EXPECT_EQ(names[tid_of_event["allreduce bucket 2"]], "comm 2");
  EXPECT_EQ(names[tid_of_event["wait"]], "comm 1");
  EXPECT_EQ(tid_of_event["allreduce bucket 0"], 2);  // the track keeps its fixed tid
  fs::remove_all(dir);
}
