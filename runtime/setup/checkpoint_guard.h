// What a run does with the checkpoints it finds in --checkpoint-dir when it starts, so that one
// run never deletes another's: a run without --resume that finds complete step_* checkpoints
// (ones it did not write) refuses to start, unless --overwrite-checkpoints 1 says to write there
// anyway (retention, --keep-checkpoints, may then delete them); --resume on a dir that is empty
// or missing starts fresh and says so. Rank 0 looks at the directory and broadcasts what it
// found, so every rank takes the same decision and throws the same error (one line, printed
// once by launch/) even where the ranks' file systems disagree.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

// Throws ValueError naming the directory (and suggesting --resume 1, a new --checkpoint-dir or
// --overwrite-checkpoints 1) when the run must not start; else returns the line rank 0 prints
// ("" for none). Collective over `world` (null: one process).
std::string check_checkpoint_dir(const TrainConfig& cfg, comm::Communicator* world);

}  // namespace st::runtime
