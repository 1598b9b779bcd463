// `shardtrain train` options: the TrainConfig option table (docs/design.md's CLI contract plus the
// runtime's extras), loading (YAML file, then flags), validation and --init-from resolution.
// Order: defaults (runtime/setup/train_config.h) < --config FILE.yaml < command-line flags.
#pragma once
#include <string>
#include <vector>

#include "launch/options.h"
#include "runtime/setup/train_config.h"

namespace st::launch {

// The table of every train option, bound to `cfg`'s fields (cfg must outlive the table).
OptionTable train_options(runtime::TrainConfig& cfg);

// Parses the train arguments (after "train"): YAML from --config, then flags, then
// resolve_init_from(), the step folder of --checkpoint-dir (launch/checkpoint_paths.h) and
// validate(). Throws UsageError naming the key/flag and the file. `notes` (optional) gets the
// lines rank 0 prints about how a path was taken (a run's root for --init-from: its newest step).
runtime::TrainConfig parse_train_args(const std::vector<std::string>& args, std::vector<std::string>* notes = nullptr);

// Range and consistency checks; messages name the option and where it was set.
void validate(const runtime::TrainConfig& cfg, const OptionTable& table);

// With --init-from DIR: DIR is a model directory or a run's checkpoint root, whose newest step is
// taken (launch/checkpoint_paths.h; `note` gets a line saying so); checks DIR/model.safetensors
// and DIR/config.json, takes the model's type and sizes from config.json (GPT-2 only); a size
// that was set explicitly and disagrees is an error; seq_len defaults to n_positions and may not
// exceed it.
void resolve_init_from(runtime::TrainConfig& cfg, const OptionTable& table, std::string* note = nullptr);

std::string train_usage();  // the --help text

}  // namespace st::launch
