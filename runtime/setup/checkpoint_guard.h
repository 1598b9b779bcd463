// What a run does with what it finds when it starts, so that one run never overwrites another's
// outputs and a mistyped path never starts a new run in silence:
//   --checkpoint-dir DIR without --resume: DIR holding complete step_* checkpoints (another run's)
//       is refused, unless --overwrite-checkpoints 1 says to write there anyway (--keep-checkpoints
//       may then delete them).
//   --resume 1: DIR is a run's checkpoint root (the newest complete step_* inside is resumed) or
//       one step folder of it (launch/ then passes the root with CheckpointOptions::resume_step):
//       that step is resumed, and it must be the root's newest, since the run goes on writing into
//       the root (a newer step would be overwritten or retired by --keep-checkpoints). A DIR that
//       exists and holds no checkpoint starts fresh, and says so — unless a folder inside it holds
//       checkpoints (DIR was the run's folder, not its checkpoints): refused, naming that folder. A
//       DIR that does not exist is refused, naming a similar path that does (a typo).
//   --metrics FILE without --resume: a FILE that holds another run's steps is refused, unless
//       --overwrite-checkpoints 1 (then it is started anew, and the run says so). A resumed run
//       cuts the file back to its checkpoint and appends (runtime/observe/metrics.h); one that
//       found no checkpoint starts the file anew and says so.
// Rank 0 looks at the file system and broadcasts its decision (the error, or the line it prints),
// so every rank throws the same error (one line, printed once by launch/) or goes on alike, even
// where the ranks' file systems disagree.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

// Throws ValueError naming the path and the ways on when the run must not start; else returns
// the lines rank 0 prints ("" for none). Collective over `world` (null: one process).
std::string check_checkpoint_dir(const TrainConfig& cfg, comm::Communicator* world);

}  // namespace st::runtime
