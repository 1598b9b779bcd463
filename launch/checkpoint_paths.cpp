// The folders the commands take (launch/checkpoint_paths.h).
#include "launch/checkpoint_paths.h"

#include <filesystem>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/setup/path_hint.h"

namespace st::launch {
namespace fs = std::filesystem;

std::optional<std::pair<std::string, int64_t>> split_step_folder(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const fs::path fp(p);
  const std::string name = fp.filename().string();
  const std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : "";
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int64_t step = std::stoll(digits);
  if (runtime::CheckpointDir::step_name(step) != name) return std::nullopt;  // the names checkpoints are written with
  const std::string root = fp.parent_path().string();
  return std::make_pair(root.empty() ? std::string(".") : root, step);
}

void resolve_checkpoint_dir(runtime::TrainConfig& cfg, const OptionTable& t) {
  const auto split = split_step_folder(cfg.checkpoint_dir);
  if (!split) return;
  if (!cfg.resume)
    ST_THROW(UsageError, "--checkpoint-dir" << t.origin_of("checkpoint-dir") << ": " << cfg.checkpoint_dir
                                            << " is one checkpoint (step " << split->second << " of the run in "
                                            << split->first << "), not a run's checkpoint directory: continue that run with "
                                            << "--resume 1, or give a new --checkpoint-dir (--init-from "
                                            << cfg.checkpoint_dir << " starts a new run from its weights)");
  cfg.checkpoint_dir = split->first;
  cfg.resume_step = split->second;
}

std::string resolve_model_dir(const std::string& dir, const std::string& flag, std::string* note) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const bool exists = fs::exists(dir, ec);
    ST_THROW(UsageError, flag << " " << dir << (exists ? " is not a directory" : " does not exist")
                              << (ec ? " (" + ec.message() + ")" : std::string()) << runtime::did_you_mean(dir));
  }
  if (fs::is_regular_file(fs::path(dir) / "config.json", ec) || runtime::SafetensorsStore::exists(dir, "model"))
    return dir;  // a model directory; what it lacks is said by whoever reads it
  // the newest complete step: incomplete newer ones are passed over (runtime/io/checkpoint_dir.h)
  const runtime::CheckpointDir::ResumePoint p = runtime::CheckpointDir(dir).resume_point();
  if (p.path.empty())
    ST_THROW(UsageError, flag << " " << dir
                              << " holds neither a model (config.json and model.safetensors or its index) nor a "
                                 "complete step_* checkpoint" << (p.note.empty() ? "" : " (" + p.note + ")"));
  if (note) *note = flag + " " + dir + ": a run's checkpoints; its newest, " + p.path + (p.note.empty() ? "" : " (" + p.note + ")");
  return p.path;
}

}  // namespace st::launch
