// A run's folder (launch/run_dir.h).
#include "launch/run_dir.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch/config.h"

namespace st::launch {
namespace {

bool from_command_line(const OptionTable& t, const std::string& name) {
  const auto it = t.origin().find(name);
  return it != t.origin().end() && it->second == "command line";
}

// a YAML scalar: as it is when plain, else double-quoted
std::string yaml_scalar(const std::string& v) {
  const bool plain = !v.empty() && v.find_first_of(":#'\"{}[],&*!|>%@`") == std::string::npos && v.front() != ' ' &&
                     v.back() != ' ' && v.front() != '-' && v.front() != '?';
  if (plain || v.empty()) return v;
  std::string q = "\"";
  for (char c : v) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

}  // namespace

void apply_run_dir(runtime::TrainConfig& cfg, const OptionTable& t) {
  if (cfg.run_dir.empty()) return;
  const bool dir_on_line = from_command_line(t, "run-dir");
  // kept: given on the command line, or in the file when the run dir is the file's too
  auto kept = [&](const char* name) { return from_command_line(t, name) || (!dir_on_line && t.was_set(name)); };
  const std::filesystem::path dir(cfg.run_dir);
  if (!kept("checkpoint-dir")) cfg.checkpoint_dir = (dir / "checkpoints").string();
  if (!kept("metrics")) cfg.metrics = (dir / "metrics.jsonl").string();
}

std::string resolved_config_yaml(const runtime::TrainConfig& cfg) {
  runtime::TrainConfig copy = cfg;
  const OptionTable t = train_options(copy);
  std::ostringstream o;
  o << "# the resolved options of a `shardtrain train` run (launch/run_dir.h); --config reads it back\n";
  for (const OptionSpec& s : t.specs())
    if (s.get) o << s.name << ": " << yaml_scalar(s.get()) << "\n";
  return o.str();
}

void write_run_config(const runtime::TrainConfig& cfg) {
  if (cfg.run_dir.empty()) return;
  std::filesystem::create_directories(cfg.run_dir);
  const std::filesystem::path p = std::filesystem::path(cfg.run_dir) / "config.yaml";
  std::ofstream f(p);
  f << resolved_config_yaml(cfg);
  if (!f) throw UsageError("--run-dir: cannot write " + p.string());
}

}  // namespace st::launch
