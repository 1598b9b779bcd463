// Trace recorder (runtime/observe/trace.h): one process-wide state; the enabled flag is an atomic read
// on every Scope, the event list is guarded by a mutex. Part files hold {"rank", "wall_start_us",
// "name" (when set), "events": [[name, track, begin, dur], ...]}; the merge shifts each rank by its wall-clock start
// and spreads a track's overlapping events over lanes (assign_lanes).
#include "runtime/observe/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "runtime/common/json_io.h"
#include "tensor/error.h"

namespace st::runtime::trace {
namespace {

struct State {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<Event> events;
  int rank = 0;
  std::string name;  // the process's name in the trace; "" = "rank R"
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  int64_t wall0_us = 0;
};

State& state() {
  static State s;
  return s;
}

int64_t wall_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<int> assign_lanes(const std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // by begin; of two that begin together the longer first, so it is the one the other nests in
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return spans[a].first != spans[b].first ? spans[a].first < spans[b].first : spans[a].second > spans[b].second;
  });
  std::vector<std::vector<int64_t>> open;  // per lane: the ends of its events still open, innermost last
  std::vector<int> lane(spans.size(), 0);
  for (size_t i : order) {
    const auto [begin, end] = spans[i];
    size_t k = 0;
    for (; k < open.size(); ++k) {
      std::vector<int64_t>& ends = open[k];
      while (!ends.empty() && ends.back() <= begin) ends.pop_back();  // ended before this one begins
      if (ends.empty() || end <= ends.back()) break;                  // free, or nests in the innermost
    }
    if (k == open.size()) open.emplace_back();
    open[k].push_back(end);
    lane[i] = static_cast<int>(k);
  }
  return lane;
}

void start(int rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.clear();
  s.rank = rank;
  s.name.clear();
  s.t0 = std::chrono::steady_clock::now();
  s.wall0_us = wall_now_us();
  s.on.store(true, std::memory_order_release);
}

void set_process_name(std::string name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.name = std::move(name);
}

void stop() { state().on.store(false, std::memory_order_release); }

bool enabled() { return state().on.load(std::memory_order_relaxed); }

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - state().t0).count();
}

void record(std::string name, const std::string& track, int64_t begin_us, int64_t end_us) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back({std::move(name), track, begin_us, std::max<int64_t>(0, end_us - begin_us)});
}

void mark(std::string name, const std::string& track) {
  if (!enabled()) return;
  int64_t t = now_us();
  record(std::move(name), track, t, t);
}

std::vector<Event> events() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.events;
}

int rank() { return state().rank; }
int64_t wall_start_us() { return state().wall0_us; }

Scope::Scope(const char* name, const char* track, int64_t index) : cname_(name), track_(track), index_(index) {
  if (enabled()) begin_us_ = now_us();
}

Scope::Scope(std::string name, const char* track) : name_(std::move(name)), track_(track) {
  if (enabled()) begin_us_ = now_us();
}

Scope::~Scope() {
  if (begin_us_ < 0 || !enabled()) return;
  int64_t end = now_us();
  std::string name = cname_ ? std::string(cname_) : std::move(name_);
  if (index_ >= 0) name += " mb" + std::to_string(index_);
  record(std::move(name), track_, begin_us_, end);
}

std::string part_path(const std::string& path, int rank) { return path + ".rank" + std::to_string(rank) + ".part"; }

void write_part(const std::string& path) {
  nlohmann::json j;
  j["rank"] = rank();
  j["wall_start_us"] = wall_start_us();
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.name.empty()) j["name"] = s.name;
  }
  nlohmann::json ev = nlohmann::json::array();
  for (const Event& e : events()) ev.push_back({e.name, e.track, e.begin_us, e.dur_us});
  j["events"] = std::move(ev);
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::string part = part_path(path, rank());
  std::ofstream out(part, std::ios::trunc);
  out << j.dump();
  out.close();
  ST_CHECK(out.good(), IOError, "trace: cannot write " << part);
}

void merge_parts(const std::string& path, int world) {
  std::vector<nlohmann::json> parts;
  int64_t t0 = INT64_MAX;
  for (int r = 0; r < world; ++r) {
    std::string part = part_path(path, r);
    ST_CHECK(std::filesystem::exists(part), IOError, "trace: rank " << r << "'s part " << part << " is missing");
    parts.push_back(read_json_file(part));
    t0 = std::min(t0, parts.back().at("wall_start_us").get<int64_t>());
  }
  // tid per track (and lane): the fixed ones first, then others in order of first appearance.
  std::map<std::string, int> tids = {{"compute", 1}, {"comm", 2}, {"optimizer", 3}, {"pipeline", 4}};
  auto tid_of = [&tids](const std::string& name) {
    auto it = tids.find(name);
    if (it == tids.end()) it = tids.emplace(name, static_cast<int>(tids.size()) + 1).first;
    return it->second;
  };
  nlohmann::json out = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    const nlohmann::json& p = parts[r];
    int64_t shift = p.at("wall_start_us").get<int64_t>() - t0;
    const std::string name = p.value("name", "rank " + std::to_string(r));
    out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", name}}}});
    out.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"sort_index", r}}}});
    // each track's events in recording order, then their lanes
    std::map<std::string, std::vector<const nlohmann::json*>> by_track;
    std::vector<std::string> track_order;
    for (const auto& e : p.at("events")) {
      const std::string track = e.at(1).get<std::string>();
      if (!by_track.count(track)) track_order.push_back(track);
      by_track[track].push_back(&e);
    }
    std::map<int, std::pair<std::string, int>> used;  // tid -> (thread name, sort index)
    for (const std::string& track : track_order) {
      const std::vector<const nlohmann::json*>& evs = by_track[track];
      std::vector<std::pair<int64_t, int64_t>> spans;
      for (const nlohmann::json* e : evs) {
        const int64_t b = e->at(2).get<int64_t>();
        spans.emplace_back(b, b + e->at(3).get<int64_t>());
      }
      const std::vector<int> lanes = assign_lanes(spans);
      const int base = tid_of(track);
      for (size_t i = 0; i < evs.size(); ++i) {
        const std::string name = lanes[i] == 0 ? track : track + " " + std::to_string(lanes[i]);
        const int tid = lanes[i] == 0 ? base : tid_of(name);
        used[tid] = {name, base * 1000 + lanes[i]};  // a track's lanes sort right below it
        out.push_back({{"name", evs[i]->at(0)}, {"cat", track}, {"ph", "X"}, {"pid", r}, {"tid", tid},
                       {"ts", spans[i].first + shift}, {"dur", evs[i]->at(3)}});
      }
    }
    for (auto& [tid, named] : used) {
      out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", tid}, {"args", {{"name", named.first}}}});
      out.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", r}, {"tid", tid}, {"args", {{"sort_index", named.second}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"}};
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::string tmp = temp_name_for(path);
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << doc.dump() << "\n";
    f.close();
    ST_CHECK(f.good(), IOError, "trace: cannot write " << tmp);
  }
  std::filesystem::rename(tmp, path);
  for (int r = 0; r < world; ++r) std::filesystem::remove(part_path(path, r));
}

void finish(const std::string& path, int rank, int world, const std::function<void()>& barrier) {
  stop();
  write_part(path);
  if (barrier) barrier();
  if (rank == 0) merge_parts(path, world);
  if (barrier) barrier();
}

}  // namespace st::runtime::trace
