// The job against the layout its flags ask for, before anything is built: a world size the
// layout does not fit is a usage error that names the command that launches it (so `train --pp 2`
// started without mpirun says `launch/mpirun.sh -n 2 -- ...`), and a flag that has no effect in
// the layout (ZeRO or a gradient dtype with one data-parallel replica, TF32 on the CPU, the
// chunked head where the unfused one runs) gets a note instead of doing nothing in silence.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/setup/train_config.h"

namespace st::launch {

// Throws UsageError unless dp · tp · pp = world (dp 0: tp · pp divides world); `args` are the
// train arguments as given, for the launch line.
void check_job_ranks(const runtime::TrainConfig& cfg, int world, const std::vector<std::string>& args);

// One line per flag set to a value that changes nothing at `dp` data-parallel replicas.
std::vector<std::string> no_effect_notes(const runtime::TrainConfig& cfg, int64_t dp);

}  // namespace st::launch
