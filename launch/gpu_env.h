// GPU settings a user gives through the environment (docs/launch.md, "GPU settings"), applied to
// the process's ops settings before a command builds a model: ST_ATTENTION (deterministic | fast |
// cudnn | flash) → ops::set_attention_backend. Library code reads no environment variable; this is
// where launch/ reads them. A malformed value is a UsageError naming the variable.
#pragma once

namespace st::launch {

void apply_gpu_environment();

}  // namespace st::launch
