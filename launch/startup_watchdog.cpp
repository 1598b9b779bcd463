// The start-up watchdog (see the header).
#include "launch/startup_watchdog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace st::launch {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kBeatSeconds = 0.2;   // how often a rank touches its marker
constexpr double kStaleSeconds = 3.0;  // a marker older than this: the process is stopped (its thread too)
constexpr double kWaitSeconds = 4.0;   // a rank that does not print waits this long for the one that does
// the phases in order. Every rank has reached kLoading before any rank leaves it (the options'
// agreement before it is a collective over the world), so from there a missing marker is a rank
// whose start-up is over (markers go when start-up ends), not one that never started.
const char* const kPhases[] = {"MPI start-up", "communicator set-up", "loading"};
constexpr int kLoading = 2;

const char* env_any(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) return v;
  return nullptr;
}
int env_int(std::initializer_list<const char*> names, int dflt) {
  const char* v = env_any(names);
  if (!v) return dflt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end && *end == '\0' && x >= 0 ? static_cast<int>(x) : dflt;
}
int phase_index(const std::string& phase) {
  for (int i = 0; i < kLoading; ++i)
    if (phase == kPhases[i]) return i;
  return kLoading;
}

// --timeout-s VALUE / --timeout-s=VALUE, else --config FILE's timeout-s, else dflt; a value the
// option parser will refuse later counts as dflt here
double timeout_of(const std::vector<std::string>& args, double dflt) {
  std::string text, config;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--timeout-s" && i + 1 < args.size()) text = args[i + 1];
    if (args[i].rfind("--timeout-s=", 0) == 0) text = args[i].substr(12);
    if (args[i] == "--config" && i + 1 < args.size()) config = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) config = args[i].substr(9);
  }
  if (text.empty() && !config.empty()) {
    try {
      const YAML::Node root = YAML::LoadFile(config);
      if (root.IsMap() && root["timeout-s"] && root["timeout-s"].IsScalar()) text = root["timeout-s"].Scalar();
    } catch (const std::exception&) {  // the option parser reports a bad file
    }
  }
  char* end = nullptr;
  const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  return !text.empty() && end && *end == '\0' && std::isfinite(v) && v > 0 ? v : dflt;
}

std::string job_key() {
  std::string key;
  if (const char* ns = env_any({"PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid"})) {
    key = ns;
  } else if (const char* job = env_any({"SLURM_JOB_ID"})) {
    const char* step = env_any({"SLURM_STEP_ID"});
    key = std::string(job) + "." + (step ? step : "0");
  } else {
    key = "ppid" + std::to_string(::getppid());  // the node's launcher daemon: the same for its ranks
  }
  for (char& c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return key;
}

std::string marker_root() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  if (const char* t = std::getenv("TMPDIR"); t && *t) return t;
  return "/tmp";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

class Watchdog {
 public:
  Watchdog(int rank, int size, bool one_node, double timeout_s, std::string dir)
      : rank_(rank), size_(size), one_node_(one_node), timeout_s_(timeout_s), dir_(std::move(dir)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    mine_ = dir_ + "/rank" + std::to_string(rank_);
    set_phase(kPhases[0]);
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() { stop(false); }

  void set_phase(const std::string& phase) {
    std::lock_guard<std::mutex> lock(m_);
    phase_ = phase;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    const std::string tmp = mine_ + ".tmp";
    std::ofstream(tmp) << phase_index(phase) << "\n";
    std::error_code ec;
    fs::rename(tmp, mine_, ec);
  }

  // Start-up over (or an error that ends every rank: whole_job): no thread; the marker goes, and
  // the directory with the last one (whole_job: every marker of the job, a stopped rank's too).
  void stop(bool whole_job) {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::error_code ec;
    fs::remove(mine_, ec);
    if (whole_job)
      fs::remove_all(dir_, ec);
    else
      fs::remove(dir_, ec);  // only when empty: the last rank out removes it
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    while (!stopped_) {
      cv_.wait_for(lock, std::chrono::duration<double>(kBeatSeconds));
      if (stopped_) break;
      ::utimensat(AT_FDCWD, mine_.c_str(), nullptr, 0);  // alive
      if (Clock::now() >= deadline_) expire();            // returns when it is not for this rank to end the job
    }
  }

  // The deadline of phase_ passed on this rank: who has not arrived, one line, _exit. Not when
  // this rank is itself behind (the others' deadlines name it), nor on one node when every rank
  // is alive and at this phase (a slow start, or a collective the communicators' deadlines
  // watch): then it looks again in a second. On several nodes, with no one named here, the job
  // ends at twice the deadline (a rank elsewhere never came).
  void expire() {
    const auto wall = fs::file_time_type::clock::now();
    const int me_phase = phase_index(phase_);
    struct Seen {
      bool exists = false;
      int phase = 0;
      double age = 0;
    };
    std::vector<Seen> seen(static_cast<size_t>(size_));
    int max_phase = me_phase;
    for (int r = 0; r < size_; ++r) {
      Seen& s = seen[static_cast<size_t>(r)];
      const std::string path = dir_ + "/rank" + std::to_string(r);
      std::error_code ec;
      const auto t = fs::last_write_time(path, ec);
      if (ec) continue;
      s.exists = true;
      s.age = std::chrono::duration<double>(wall - t).count();
      std::ifstream(path) >> s.phase;
      s.phase = std::clamp(s.phase, 0, kLoading);
      if (r == rank_) s.age = 0, s.phase = me_phase;
      if (s.age <= kStaleSeconds) max_phase = std::max(max_phase, s.phase);
    }
    std::vector<int> named, waited;
    std::vector<std::string> why;
    for (int r = 0; r < size_; ++r) {
      const Seen& s = seen[static_cast<size_t>(r)];
      std::ostringstream o;
      if (!s.exists) {
        if (me_phase >= kLoading) continue;  // its start-up is over (see kLoading)
        if (!one_node_) continue;            // perhaps on another node: no marker here either way
        o << "not started";
      } else if (s.age > kStaleSeconds) {
        o.precision(2);
        o << std::fixed << "no sign of life for " << s.age << " s: stopped?";
      } else if (s.phase < max_phase) {
        o << "still at " << kPhases[s.phase];
      } else {
        waited.push_back(r);
        continue;
      }
      named.push_back(r);
      why.push_back(o.str());
    }
    const auto again = [&](double s) {
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    if (me_phase < max_phase) return again(1.0);  // behind: not for this rank to say
    if (named.empty()) {
      if (one_node_ || overdue_ < 1) {
        overdue_ += one_node_ ? 0 : 1;
        return again(one_node_ ? 1.0 : timeout_s_);
      }
    }
    const bool printer = !waited.empty() && waited.front() == rank_;
    if (!printer) {  // the lowest live rank on time prints; the others leave after it
      std::this_thread::sleep_for(std::chrono::duration<double>(kWaitSeconds));
      std::error_code ec;
      fs::remove(mine_, ec);
      ::_exit(1);
    }
    std::ostringstream o;
    o << "[rank " << rank_ << "] shardtrain: error: start-up: " << phase_ << " did not complete within --timeout-s "
      << timeout_s_ << ": ";
    if (named.size() == 1) {
      o << "rank " << named[0] << " has not arrived (" << why[0] << ")";
    } else if (!named.empty()) {
      o << "ranks " << rank_list(named) << " have not arrived (";
      for (size_t i = 0; i < named.size(); ++i) o << (i ? "; " : "") << "rank " << named[i] << ": " << why[i];
      o << ")";
    } else {
      o << (one_node_ ? "every rank is alive and at it" : "every rank of this node is alive and at it (a rank on "
                                                          "another node did not arrive: see that node's line)");
    }
    o << (waited.size() == 1 ? "; rank " : "; ranks ") << rank_list(waited) << " waited at " << kPhases[max_phase]
      << "\n";
    const std::string line = o.str();
    ssize_t ignored = ::write(2, line.data(), line.size());
    (void)ignored;
    std::error_code ec;
    fs::remove_all(dir_, ec);  // the job ends here: every marker, the stopped rank's too
    ::_exit(1);
  }

  int rank_, size_;
  bool one_node_;
  double timeout_s_;
  std::string dir_, mine_, phase_;
  Clock::time_point deadline_;
  bool stopped_ = false;
  int overdue_ = 0;  // deadlines passed with no one named (several nodes)
  std::mutex m_;
  std::condition_variable cv_;
  std::thread thread_;
};

std::unique_ptr<Watchdog>& the_watchdog() {
  static std::unique_ptr<Watchdog> w;
  return w;
}

}  // namespace

void start_startup_watchdog(const std::vector<std::string>& args, double default_s) {
  const int rank = env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, -1);
  const int size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"}, 0);
  if (rank < 0 || size <= 1 || rank >= size || the_watchdog()) return;
  const int local = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, -1);
  const int nodes = env_int({"SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1);
  const bool one_node = local >= 0 ? local == size : nodes <= 1;
  const std::string dir = marker_root() + "/shardtrain-startup-" + std::to_string(::getuid()) + "-" + job_key();
  the_watchdog() = std::make_unique<Watchdog>(rank, size, one_node, timeout_of(args, default_s), dir);
}

void startup_watchdog_phase(const std::string& phase) {
  if (!the_watchdog()) return;
  if (phase.empty())
    stop_startup_watchdog();
  else
    the_watchdog()->set_phase(phase);
}

void stop_startup_watchdog(bool whole_job) {
  if (the_watchdog()) the_watchdog()->stop(whole_job);
  the_watchdog().reset();
}

}  // namespace st::launch
