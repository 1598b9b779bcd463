// Built while runtime/trainer.cpp does not exist yet: the CLI, configs and data tools work, and
// `shardtrain train` says plainly that the trainer is missing (usage-class exit code 2).
#include <iostream>

#include "launch/commands.h"

namespace st::launch {

int train_command(const runtime::TrainConfig&) {
  std::cerr << "train: not built yet (runtime/trainer.cpp is missing)\n";
  return 2;
}

}  // namespace st::launch
