// Built only when runtime/trainer.cpp exists (launch/CMakeLists.txt): hands the validated
// options to the trainer.
#include "launch/commands.h"
#include "runtime/trainer.h"

namespace st::launch {

int train_command(const runtime::TrainConfig& cfg) { return runtime::run_training(cfg); }

}  // namespace st::launch
