// SIGINT / SIGTERM handling of `shardtrain train` (launch/stop_signals.h).
#include "launch/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "launch/launch_command.h"

namespace st::launch {
namespace {

// the notice, made before any signal (the handler formats nothing); empty: print none
char g_notice[160] = {0};
std::atomic<int> g_finished{0};  // the run returned: a signal now ends the process quietly

void put(const char* s) {
  const ssize_t r = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)r;
}

// the first signal's alarm went off: no step boundary came within the grace
extern "C" void on_stop_alarm(int) {
  const int sig = runtime::stop_signal();
  put("shardtrain: no step boundary within the stop's grace (a rank lost, or a step longer than it): stopped at once; "
      "nothing saved since the newest checkpoint\n");
  ::_exit(128 + (sig != 0 ? sig : SIGTERM));
}

extern "C" void on_stop_signal(int sig) {
  // launch/mpirun.sh passes its Ctrl-C / SIGTERM on as SIGUSR1 / SIGUSR2 (mpirun forwards those)
  if (sig == SIGUSR1) sig = SIGINT;
  if (sig == SIGUSR2) sig = SIGTERM;
  if (g_finished.load() != 0) ::_exit(128 + sig);
  // before the step loop (start-up: nothing to save yet; mpirun ending a job another rank failed)
  if (runtime::stop_signal() == 0 && !runtime::stop_armed()) ::_exit(128 + sig);
  if (runtime::stop_signal() == 0) {
    runtime::request_stop(sig);
    ::alarm(static_cast<unsigned>(runtime::stop_grace()));
    if (g_notice[0] != 0) put(g_notice);
    return;
  }
  put(sig == SIGINT    ? "shardtrain: a second signal (SIGINT): stopped at once; nothing saved since the newest checkpoint\n"
      : sig == SIGTERM ? "shardtrain: a second signal (SIGTERM): stopped at once; nothing saved since the newest checkpoint\n"
                       : "shardtrain: a second signal: stopped at once; nothing saved since the newest checkpoint\n");
  ::_exit(128 + sig);
}

}  // namespace

void install_stop_signals(bool notice) {
  if (notice) {
    // on a terminal the progress bar holds the line: start a new one
    std::snprintf(g_notice, sizeof g_notice, "%sshardtrain: stopping after this step (a second Ctrl-C / signal stops at once)\n",
                  ::isatty(STDOUT_FILENO) ? "\n" : "");
  }
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write in progress goes on
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
  sa.sa_handler = on_stop_alarm;
  sigaction(SIGALRM, &sa, nullptr);
}

void end_stop_grace() {
  g_finished.store(1);
  ::alarm(0);
}

int stop_exit_code(int signal, bool under_mpi) { return under_mpi ? 0 : 128 + signal; }

std::string stop_line(const runtime::StopRecord& r, const std::vector<std::string>& args, int ranks, bool gpus,
                      bool has_checkpoint_dir) {
  std::string line = "stopped by " + runtime::signal_name(r.signal) + " after step " + std::to_string(r.step) + " of " +
                     std::to_string(r.steps);
  if (r.checkpoint.empty()) {
    line += has_checkpoint_dir ? "; no checkpoint (--save-on-signal 0, none written before): a rerun starts over"
                               : "; no checkpoint (no --checkpoint-dir): a rerun starts over";
    return line;
  }
  line += "; checkpoint " + r.checkpoint +
          (r.saved ? std::string() : std::string(" (--save-on-signal 0: the steps after it run again)"));
  // the command as run, --resume 1 in place of any --resume (and --overwrite-checkpoints, which a
  // resume refuses, dropped)
  std::vector<std::string> resume;
  bool replaced = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool with_value = i + 1 < args.size();
    if (a == "--resume" || a == "--overwrite-checkpoints") {
      if (a == "--resume") {
        resume.push_back("--resume");
        resume.push_back("1");
        replaced = true;
      }
      if (with_value) ++i;
      continue;
    }
    if (a.rfind("--resume=", 0) == 0) {
      resume.push_back("--resume=1");
      replaced = true;
      continue;
    }
    if (a.rfind("--overwrite-checkpoints=", 0) == 0) continue;
    resume.push_back(a);
  }
  if (!replaced) {
    resume.push_back("--resume");
    resume.push_back("1");
  }
  return line + "; resume: " + launch_line(ranks, gpus, "train", resume);
}

}  // namespace st::launch
