// Built while runtime/sampler.cpp does not exist yet: `shardtrain sample` parses and validates
// its options, then says plainly that sampling is missing (exit code 2).
#include <iostream>

#include "launch/commands.h"

namespace st::launch {

int sample_command(const runtime::SampleConfig&) {
  std::cerr << "sample: not built yet (runtime/sampler.cpp is missing)\n";
  return 2;
}

}  // namespace st::launch
