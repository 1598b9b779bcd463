// The built binary run as a user runs it, for the CLI fault tests: its exit status, its output
// (stdout and stderr together) and its "shardtrain: error: " line, counted.
#pragma once
#include <string>

namespace st::testing {

struct CliResult {
  int code = -1;           // exit status, -1 on a signal
  std::string out;         // stdout and stderr together
  std::string error;       // the (last) "shardtrain: error: " line without its prefix, "" if none
  int error_lines = 0;
  double seconds = 0;
};
// `bin` `args` with SHARDTRAIN_PROGRESS=0 and `env` (shell assignments) before it.
CliResult run_cli(const std::string& bin, const std::string& args, const std::string& env = "");

bool has(const std::string& s, const std::string& needle);

// A fresh directory under the system temp dir, unique to this process.
std::string fresh_temp_dir(const std::string& name);

}  // namespace st::testing
