// Trace: a process-wide recorder of timed events, written as one Chrome / Perfetto trace JSON
// (`--trace FILE.json`; open it in ui.perfetto.dev or chrome://tracing).
//
// Model: each rank is a process (pid = rank, named "rank R (dp d, tp t, pp s)" by the trainer); each track is a thread (tid:
// compute 1, comm 2, optimizer 3, pipeline 4, any other name the next free number). Events of one
// track that overlap without nesting (the DP reducer's bucket all-reduces in flight together)
// cannot share a thread — Perfetto and Chrome draw a thread's slices as a stack — so the merge
// puts each on the first lane where it fits (assign_lanes): lane 0 is the track itself, lane k
// the thread "TRACK k" ("comm 1", "comm 2"), sorted right below it. An event is
// a complete event ("ph": "X") with a begin and a duration in microseconds. Within one rank
// times are from a steady clock since trace::start(); across ranks they are aligned by each
// rank's wall-clock start time (the merged file starts at the earliest rank's start), which is
// good to the clock skew between hosts (on one node: exact).
//
// Cost: while disabled (the default) a Scope is one relaxed atomic load and no allocation; names
// are formatted only when recording. Recording appends to a vector under a mutex (the DP reducer
// may record from another thread).
//
// Gathering: at the end every rank writes its events to FILE.json.rank<R>.part, the caller puts
// a barrier between, and rank 0 merges the parts into FILE.json and deletes them (finish() does
// all three given a barrier callback, so this file needs no communicator). Ranks on several
// nodes need FILE's directory on a shared file system (as checkpoints do).
//
// Usage (trainer / pipeline / reducer):
//   trace::start(rank);                                   // when cfg.trace is set
//   { trace::Scope s("forward", "compute", mb); ... }      // event "forward mb3" on "compute"
//   { trace::Scope s("allreduce bucket", "comm", b); ... }
//   trace::finish(cfg.trace, rank, world, [&] { comm->barrier()->wait(); });
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace st::runtime::trace {

struct Event {
  std::string name;
  std::string track;
  int64_t begin_us = 0;  // since start()
  int64_t dur_us = 0;
};

// Enables recording for this process (rank = the trace's pid) and clears earlier events; the
// process is named "rank R" until set_process_name() names it otherwise (the trainer adds the
// rank's dp, tp and pp coordinates).
void start(int rank);
void set_process_name(std::string name);
// Disables recording (events are kept until the next start()).
void stop();
bool enabled();
int64_t now_us();  // microseconds since start() (0 when never started)

// Records one event (no-op while disabled).
void record(std::string name, const std::string& track, int64_t begin_us, int64_t end_us);
// Records an instantaneous event (zero duration), e.g. "loss scale halved".
void mark(std::string name, const std::string& track);

std::vector<Event> events();  // this process's events so far, in recording order
int rank();
int64_t wall_start_us();  // this process's start() in microseconds since the Unix epoch

// An event from construction to destruction. name + " mb" + index when index >= 0.
class Scope {
 public:
  Scope(const char* name, const char* track, int64_t index = -1);
  Scope(std::string name, const char* track);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* cname_ = nullptr;
  std::string name_;
  const char* track_;
  int64_t index_ = -1;
  int64_t begin_us_ = -1;  // -1: tracing was off at construction
};

// The lane of each [begin, end) span of one track: the first (from 0) where, once the lane's
// events that ended by its begin are closed, it nests in the innermost still open or nothing is
// open. Spans are placed in order of begin (of equal begins the longer first), so events within
// a lane either nest or do not overlap.
std::vector<int> assign_lanes(const std::vector<std::pair<int64_t, int64_t>>& spans);

// Part file of `rank` for the merged trace `path`.
std::string part_path(const std::string& path, int rank);
// Writes this process's events to part_path(path, rank()).
void write_part(const std::string& path);
// Merges the parts of ranks 0..world-1 into `path` (one JSON object {"traceEvents": [...]}) and
// deletes them; throws IOError naming a missing or unreadable part.
void merge_parts(const std::string& path, int world);
// write_part on every rank, barrier(), merge on rank 0, barrier(); then stop().
void finish(const std::string& path, int rank, int world, const std::function<void()>& barrier);

}  // namespace st::runtime::trace
