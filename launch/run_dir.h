// --run-dir DIR: a run's files in one folder — DIR/checkpoints (--checkpoint-dir), DIR/metrics.jsonl
// (--metrics), DIR/config.yaml (the run's resolved options, which --config reads back; rank 0
// writes it at start), DIR/plots (launch/plot.sh --run-dir DIR). A --checkpoint-dir or --metrics
// given where the run dir was given or closer to the command (a flag beats a config file's
// --run-dir) keeps its own path. --trace stays where it is named (DIR/trace.json is the usual place).
#pragma once
#include <string>

#include "launch/options.h"
#include "runtime/setup/train_config.h"

namespace st::launch {

// Sets cfg.checkpoint_dir and cfg.metrics under cfg.run_dir (when set) unless the table says they
// were given at the run dir's level or above.
void apply_run_dir(runtime::TrainConfig& cfg, const OptionTable& table);

// Every train option of `cfg` as the YAML mapping --config reads ("key: value" lines, in the
// table's order): loaded back with no flags it gives the same options.
std::string resolved_config_yaml(const runtime::TrainConfig& cfg);

// Rank 0 at start: DIR/config.yaml (created with DIR). Nothing when cfg.run_dir is empty.
void write_run_config(const runtime::TrainConfig& cfg);

}  // namespace st::launch
