// Command lines for the user (launch/launch_command.h).
#include "launch/launch_command.h"

namespace st::launch {
namespace {

std::string& program() {
  static std::string p = "build/shardtrain";
  return p;
}

}  // namespace

void set_program_path(const std::string& argv0) {
  if (!argv0.empty()) program() = argv0;
}

const std::string& program_path() { return program(); }

std::string shell_quote(const std::string& word) {
  const bool safe = !word.empty() && word.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                         "-_./=:,+%@") == std::string::npos;
  if (safe) return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string launch_line(int64_t ranks, bool gpus, const std::string& command, const std::vector<std::string>& args,
                        const std::vector<std::string>& mpirun_options) {
  std::string line;
  if (ranks > 1 || gpus || !mpirun_options.empty()) {
    line = std::string("launch/mpirun.sh ") + (gpus ? "--gpus " : "") + "-n " + std::to_string(ranks) + " ";
    for (const std::string& o : mpirun_options) line += shell_quote(o) + " ";
    line += "-- ";
  }
  line += shell_quote(program_path()) + " " + command;
  for (const std::string& a : args) line += " " + shell_quote(a);
  return line;
}

}  // namespace st::launch
