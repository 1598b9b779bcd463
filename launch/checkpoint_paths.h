// Which folder each command takes (README.md, "Checkpoints"), so that a run's checkpoint root and
// one step folder of it work wherever a checkpoint is asked for:
//   train --checkpoint-dir DIR   a run's checkpoint root (it holds step_NNNNNNNN/ folders); with
//                                --resume 1 also one step folder ROOT/step_N, which is resumed
//                                (the run goes on writing into ROOT; runtime/setup/checkpoint_guard.h
//                                checks it is ROOT's newest). Without --resume a step folder is a
//                                usage error: a new run's checkpoints never go inside another's.
//   train --init-from DIR        a model directory (config.json + model weights: a step folder, a
//   generate --checkpoint DIR    Hugging Face save_pretrained directory) or a run's checkpoint root
//                                (its newest complete step)
// A DIR that does not exist is a usage error naming a similar path that does (a typo).
// A step folder is recognised by its name alone (CheckpointDir::step_name), so every rank decides
// alike without looking at the file system.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/options.h"
#include "runtime/setup/train_config.h"

namespace st::launch {

// "ROOT/step_00000050" (or with a trailing '/') → {ROOT, 50}; nullopt for any other name.
std::optional<std::pair<std::string, int64_t>> split_step_folder(const std::string& path);

// --checkpoint-dir naming a step folder: with --resume, checkpoint_dir becomes its root and
// resume_step its step; without, a UsageError saying what to do instead.
void resolve_checkpoint_dir(runtime::TrainConfig& cfg, const OptionTable& table);

// The model directory `dir` stands for (see above); `flag` names it in errors ("--init-from").
// UsageError when it does not exist (naming a similar path) or holds neither a model nor a
// complete checkpoint. `note` (optional) gets a line when a root was resolved to its newest step.
std::string resolve_model_dir(const std::string& dir, const std::string& flag, std::string* note = nullptr);

}  // namespace st::launch
