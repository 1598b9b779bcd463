// Progress: the training loop's progress bar, drawn on one terminal line below the step lines.
//
//   step   40/200 | loss 2.4312 | lr 1.96e-03 | 5120 tok/s | 98.1 ms      <- line(): printed once
//   [##########------------------------------]  40/200  20%  eta 0:15    <- update(): redrawn
//
// The bar is redrawn in place with '\r' and erased ("\r\033[K") before each step line, so step
// lines scroll above it. It goes to the same stream as the step lines (stdout) so mpirun, which
// forwards each rank's streams separately, cannot interleave them. Disabled (draw = false: rank
// != 0, --progress 0 (the CLI's SHARDTRAIN_PROGRESS=0 sets it), or — for the stdout constructor —
// stdout not a terminal (isatty; under Open MPI, which gives each rank a pseudo-terminal, mpirun's
// stdout), so a redirected run or a SLURM .out file holds plain step lines), update() draws nothing and line() just prints the line. format_bar() is the pure part
// (tested).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace st::runtime {

// "[####------]  40/200  20%  eta 0:15" with `width` bar cells; eta from the mean time per step
// so far (steps done since `first` in `elapsed_s`); "eta --" before the first step is done.
std::string format_bar(int64_t done, int64_t total, int64_t first, double elapsed_s, int width = 30);
// "0:15", "3:07", "1:02:03".
std::string format_duration(double seconds);

class Progress {
 public:
  // Steps `first`..`total`: a resumed run starts at first > 0. The clock starts here. On stdout,
  // drawn only when stdout is a terminal.
  Progress(int64_t first, int64_t total, bool draw);
  Progress(int64_t first, int64_t total, bool draw, std::ostream& out);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool drawing() const { return draw_; }
  // Prints `text` + '\n' above the bar (erases the bar, prints, redraws it).
  void line(const std::string& text);
  // `done` steps are complete (first < done <= total); redraws the bar.
  void update(int64_t done);
  // Leaves the last bar on screen and ends its line (idempotent).
  void finish();

 private:
  void draw_bar();
  std::ostream& out_;
  int64_t first_, total_, done_;
  bool draw_;
  bool shown_ = false;
  bool finished_ = false;
  double t0_;
};

}  // namespace st::runtime
