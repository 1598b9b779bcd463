// Progress bar (runtime/observe/progress.h). Time is steady_clock seconds; the bar is redrawn on every
// update (callers update once per optimizer step, far below a terminal's refresh rate).
#include "runtime/observe/progress.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace st::runtime {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Open MPI gives every rank a pseudo-terminal of its own, whatever mpirun's stdout is; so under
// it (OMPI_COMM_WORLD_RANK set) stdout counts as a terminal when mpirun's does: the rank's
// parent (mpirun on its node) has a /dev/pts/N or /dev/tty* as its fd 1.
bool stdout_is_terminal() {
  if (::isatty(STDOUT_FILENO) != 1) return false;
  if (!std::getenv("OMPI_COMM_WORLD_RANK")) return true;
  const std::string fd1 = "/proc/" + std::to_string(::getppid()) + "/fd/1";
  char target[256];
  const ssize_t n = ::readlink(fd1.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string t(target, static_cast<size_t>(n));
  return t.rfind("/dev/pts/", 0) == 0 || t.rfind("/dev/tty", 0) == 0;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "--";
  int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string format_bar(int64_t done, int64_t total, int64_t first, double elapsed_s, int width) {
  if (total < 1) total = 1;
  done = std::min(std::max<int64_t>(done, 0), total);
  int filled = static_cast<int>(static_cast<double>(done) * width / static_cast<double>(total));
  std::ostringstream o;
  o << '[' << std::string(filled, '#') << std::string(width - filled, '-') << "] ";
  std::string tw = std::to_string(total);
  std::string dw = std::to_string(done);
  o << std::string(tw.size() > dw.size() ? tw.size() - dw.size() : 0, ' ') << dw << '/' << tw << ' ';
  char pct[8];
  std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(100 * done / total));
  o << pct << "  eta ";
  int64_t ran = done - first;
  if (done >= total)
    o << "0:00";
  else if (ran <= 0)
    o << "--";
  else
    o << format_duration(elapsed_s / static_cast<double>(ran) * static_cast<double>(total - done));
  return o.str();
}

// stdout redirected to a file or a pipe (a log, a SLURM .out) gets plain step lines: no '\r'
// redraws in a log
Progress::Progress(int64_t first, int64_t total, bool draw)
    : Progress(first, total, draw && stdout_is_terminal(), std::cout) {}

Progress::Progress(int64_t first, int64_t total, bool draw, std::ostream& out)
    : out_(out), first_(first), total_(total), done_(first), draw_(draw), t0_(now_s()) {}

Progress::~Progress() { finish(); }

void Progress::draw_bar() {
  out_ << '\r' << format_bar(done_, total_, first_, now_s() - t0_) << "\033[K" << std::flush;
  shown_ = true;
}

void Progress::line(const std::string& text) {
  if (draw_ && shown_) out_ << "\r\033[K";
  out_ << text << '\n';
  if (draw_ && !finished_) draw_bar();
  else out_ << std::flush;
}

void Progress::update(int64_t done) {
  done_ = done;
  if (draw_ && !finished_) draw_bar();
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (draw_ && shown_) out_ << '\n' << std::flush;
}

}  // namespace st::runtime
