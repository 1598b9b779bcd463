// Built only when runtime/sampler.cpp exists (launch/CMakeLists.txt): runs the sampler.
#include "launch/commands.h"
#include "runtime/sampler.h"

namespace st::launch {

int sample_command(const runtime::SampleConfig& cfg) { return runtime::run_sample(cfg); }

}  // namespace st::launch
