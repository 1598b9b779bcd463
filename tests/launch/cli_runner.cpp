// Running the built binary (see the header).
#include "tests/launch/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>

namespace st::testing {

CliResult run_cli(const std::string& bin, const std::string& args, const std::string& env) {
  const std::string cmd = "SHARDTRAIN_PROGRESS=0 " + env + " '" + bin + "' " + args + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string tag = "shardtrain: error: ";
  for (size_t at = r.out.find(tag); at != std::string::npos; at = r.out.find(tag, at + 1)) {
    ++r.error_lines;
    r.error = r.out.substr(at + tag.size(), r.out.find('\n', at) - at - tag.size());
  }
  return r;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

std::string fresh_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("st_faults_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace st::testing
