// GPU settings from the environment (see the header).
#include "launch/gpu_env.h"

#include <cstdlib>

#include "launch/options.h"
#include "ops/attention_backend.h"
#include "tensor/error.h"

namespace st::launch {

void apply_gpu_environment() {
  const char* e = std::getenv("ST_ATTENTION");
  if (!e || !*e) return;
  try {
    ops::set_attention_backend(ops::parse_attention_backend(e, "ST_ATTENTION"));
  } catch (const ValueError& err) {
    throw UsageError(err.what());
  }
}

}  // namespace st::launch
