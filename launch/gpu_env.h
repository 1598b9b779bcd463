// GPU settings a user gives through the environment (docs/launch.md, "GPU settings"), applied to
// the process's ops settings before a command builds a model: SHARDTRAIN_ATTENTION (deterministic |
// fast | cudnn | flash; ST_ATTENTION, its older name, is still read) → ops::set_attention_backend.
// Library code reads no environment variable; this is where launch/ reads them, once: `train` and
// `generate` apply the setting, `info` describes it. A malformed value is a UsageError naming the
// variable.
#pragma once
#include <optional>
#include <string>

#include "ops/attention_backend.h"

namespace st::launch {

// The attention backend the environment asks for.
struct AttentionSetting {
  std::string variable;  // the variable read: SHARDTRAIN_ATTENTION, or ST_ATTENTION when only it is set
  std::string value;     // its value, "deterministic" when neither is set
  std::optional<ops::AttentionBackend> backend;  // empty: the value names no backend, and
  std::string error;                             // this says so in one line
};

// UsageError when both names are set to different values.
AttentionSetting attention_setting();
// Applies attention_setting() (UsageError for a value that names no backend).
void apply_gpu_environment();

}  // namespace st::launch
