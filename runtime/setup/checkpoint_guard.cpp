// The start-of-run look at --checkpoint-dir and --metrics (runtime/setup/checkpoint_guard.h).
#include "runtime/setup/checkpoint_guard.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/setup/path_hint.h"

namespace st::runtime {
namespace fs = std::filesystem;
namespace {

struct Decision {
  std::string error;  // non-empty: every rank throws it
  std::string note;   // else: rank 0 prints it
};

std::string count_of(const std::vector<int64_t>& steps) {
  return std::to_string(steps.size()) + (steps.size() == 1 ? " checkpoint" : " checkpoints") + " (newest step " +
         std::to_string(steps.back()) + ")";
}

// The folders at most two levels below `dir` that hold complete checkpoints (a run's folder given
// for its checkpoints), sorted; at most a few hundred entries are looked at.
std::vector<std::string> checkpoint_roots_below(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  int looked = 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end && looked < 400; it.increment(ec), ++looked) {
    std::error_code dec;
    if (!it->is_directory(dec)) continue;
    const std::string name = it->path().filename().string();
    if (name.rfind("step_", 0) == 0 || name.rfind(".", 0) == 0) {  // a checkpoint itself, or hidden
      it.disable_recursion_pending();
      continue;
    }
    if (!CheckpointDir(it->path().string()).complete_steps().empty()) {
      found.push_back(it->path().string());
      it.disable_recursion_pending();
    } else if (it.depth() >= 1) {
      it.disable_recursion_pending();  // children (depth 0) and grandchildren (depth 1) only
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The steps recorded in a metrics file (lines that are JSON objects with an integer "step").
std::vector<int64_t> metrics_steps(const std::string& path) {
  std::vector<int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer())
      steps.push_back(j["step"].get<int64_t>());
  }
  return steps;
}

Decision look_at_checkpoints(const TrainConfig& cfg) {
  if (cfg.checkpoint_dir.empty()) return {};
  const CheckpointDir dir(cfg.checkpoint_dir);
  const std::vector<int64_t> steps = dir.complete_steps();
  const std::string root = cfg.checkpoint_dir;
  std::error_code ec;
  if (!cfg.resume) {
    if (steps.empty()) return {};
    if (cfg.overwrite_checkpoints)
      return {"", "--overwrite-checkpoints: writing into " + root + ", which holds " + count_of(steps) + " of another run"};
    return {"--checkpoint-dir " + root + " already holds " + count_of(steps) +
                " of another run: continue it with --resume 1, or give a new --checkpoint-dir (--overwrite-checkpoints 1 "
                "writes there anyway)",
            ""};
  }
  if (cfg.resume_step >= 0) {  // a step folder of `root` was given
    const std::string given = dir.path_for(cfg.resume_step);
    if (std::find(steps.begin(), steps.end(), cfg.resume_step) == steps.end()) {
      if (steps.empty()) return {"--resume: " + given + " does not exist" + did_you_mean(given), ""};
      return {"--resume: " + given + " does not exist: " + root + " holds " + count_of(steps) +
                  "; resume the newest with --checkpoint-dir " + root,
              ""};
    }
    if (steps.back() != cfg.resume_step)
      return {"--resume: " + given + " is not the newest checkpoint of " + root + " (step " + std::to_string(steps.back()) +
                  " is), and the run would write over the newer ones: resume the newest with --checkpoint-dir " + root +
                  ", or copy " + given + " into a new directory and resume from there",
              ""};
    return {};
  }
  if (!fs::exists(root, ec))
    return {"--resume: --checkpoint-dir " + root + " does not exist" + did_you_mean(root) +
                ": check the path, or drop --resume 1 to start a new run there",
            ""};
  if (!fs::is_directory(root, ec)) return {"--checkpoint-dir " + root + " is a file, not a directory", ""};
  if (!steps.empty()) return {};
  const std::vector<std::string> below = checkpoint_roots_below(root);
  if (!below.empty()) {
    const std::vector<int64_t> theirs = CheckpointDir(below.front()).complete_steps();
    return {"--resume: " + root + " holds no checkpoint, but " + below.front() + " holds " + count_of(theirs) +
                (below.size() > 1 ? " (and " + std::to_string(below.size() - 1) + " other folders below it)" : "") +
                ": --checkpoint-dir " + below.front() + " resumes it",
            ""};
  }
  return {"", "--resume: no checkpoint in " + root + " yet; starting fresh"};
}

// `fresh`: --resume found no checkpoint, so the run starts at step 0 (its metrics are cut back to it).
Decision look_at_metrics(const TrainConfig& cfg, bool fresh) {
  if (cfg.metrics.empty() || (cfg.resume && !fresh)) return {};
  std::error_code ec;
  if (!fs::is_regular_file(cfg.metrics, ec)) return {};
  const std::vector<int64_t> steps = metrics_steps(cfg.metrics);
  if (steps.empty()) return {};
  const std::string what = "steps " + std::to_string(steps.front()) + "-" + std::to_string(steps.back()) +
                           (steps.size() == 1 ? " (1 line)" : " (" + std::to_string(steps.size()) + " lines)");
  if (fresh) return {"", "--resume: --metrics " + cfg.metrics + " holds " + what + " that no checkpoint kept; they go"};
  if (cfg.overwrite_checkpoints)
    return {"", "--overwrite-checkpoints: --metrics " + cfg.metrics + ", which holds " + what +
                    " of another run, is started anew"};
  return {"--metrics " + cfg.metrics + " already holds " + what + " of another run, which a new run would erase: " +
              (cfg.checkpoint_dir.empty() ? std::string() : "continue that run with --resume 1, ") +
              "give a new --metrics file, or --overwrite-checkpoints 1 to start it anew",
          ""};
}

// Rank 0's text on every rank (`text` is read on rank 0 only).
std::string broadcast_text(const std::string& text, comm::Communicator& world) {
  const Device dev = std::string(world.backend()) == "nccl" ? Device::cuda : Device::cpu;  // NCCL takes device tensors
  Tensor n = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}).to(dev);  // (1)
  world.broadcast(n, 0)->wait();
  const int64_t len = n.to(Device::cpu).data<int64_t>()[0];
  if (len == 0) return "";
  std::vector<int64_t> chars(static_cast<size_t>(len), 0);  // one i64 per byte: messages are short
  if (world.rank() == 0)
    for (int64_t i = 0; i < len; ++i) chars[i] = static_cast<unsigned char>(text[i]);
  Tensor t = Tensor::from_vector(chars, {len}).to(dev);  // (len)
  world.broadcast(t, 0)->wait();
  Tensor host = t.to(Device::cpu);
  std::string out(static_cast<size_t>(len), '\0');
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<char>(host.data<int64_t>()[i]);
  return out;
}

}  // namespace

std::string check_checkpoint_dir(const TrainConfig& cfg, comm::Communicator* world) {
  Decision d;
  if (!world || world->rank() == 0) {
    d = look_at_checkpoints(cfg);
    if (d.error.empty()) {
      const Decision m = look_at_metrics(cfg, /*fresh=*/cfg.resume && !d.note.empty());
      d.error = m.error;
      if (!m.note.empty()) d.note += (d.note.empty() ? "" : "\n") + m.note;
    }
  }
  if (world && world->size() > 1) {
    d.error = broadcast_text(d.error, *world);
    d.note = broadcast_text(d.note, *world);
  }
  if (!d.error.empty()) ST_THROW(ValueError, d.error);
  return d.note;
}

}  // namespace st::runtime
