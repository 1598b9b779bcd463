// SampleConfig: the options of `shardtrain sample` (docs/design.md's CLI contract), as plain data.
// launch/ fills and validates it; the sampler (runtime/train/sampler.h: int run_sample(const
// SampleConfig&)) only reads it.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/device_names.h"

namespace st::runtime {

struct SampleConfig {
  std::string checkpoint;   // our checkpoint dir (step_*/ or its parent: the newest) or an HF dir
  std::string prompt;       // text, byte-tokenized
  int64_t tokens = 64;      // tokens to generate
  double temperature = 1.0;  // 0: greedy (deterministic)
  int64_t top_k = 0;        // 0: the whole vocabulary
  uint64_t seed = 1;
  Device device = Device::cpu;
};

}  // namespace st::runtime
