// GPU settings from the environment (see the header).
#include "launch/gpu_env.h"

#include <cstdlib>

#include "launch/options.h"
#include "tensor/error.h"

namespace st::launch {

AttentionSetting attention_setting() {
  auto read = [](const char* name) {
    const char* e = std::getenv(name);
    return e && *e ? std::optional<std::string>(e) : std::nullopt;
  };
  const std::optional<std::string> now = read("SHARDTRAIN_ATTENTION"), old = read("ST_ATTENTION");
  ST_CHECK(!now || !old || *now == *old, UsageError,
           "SHARDTRAIN_ATTENTION=" << *now << " and ST_ATTENTION=" << *old
                                   << " disagree: set one (ST_ATTENTION is the older name of the same setting)");
  AttentionSetting s{now || !old ? "SHARDTRAIN_ATTENTION" : "ST_ATTENTION", now ? *now : old ? *old : "deterministic", {}, {}};
  try {
    s.backend = ops::parse_attention_backend(s.value, s.variable);
  } catch (const ValueError& err) {
    s.error = err.what();
  }
  return s;
}

void apply_gpu_environment() {
  const AttentionSetting s = attention_setting();
  if (!s.backend) throw UsageError(s.error);
  ops::set_attention_backend(*s.backend);
}

}  // namespace st::launch
