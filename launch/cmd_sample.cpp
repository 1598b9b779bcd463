// `shardtrain sample --checkpoint DIR --prompt TEXT --tokens N [--temperature F --top-k N]`:
// parses and validates the options, then runs the sampler (runtime/train/sampler.h).
#include <filesystem>
#include <iostream>

#include "launch/commands.h"
#include "launch/options.h"
#include "runtime/train/sampler.h"

namespace st::launch {

runtime::SampleConfig parse_sample_args(const std::vector<std::string>& args, std::string* help) {
  runtime::SampleConfig c;
  OptionTable t("sample", false);
  t.add({"checkpoint", "sample", "DIR", "checkpoint dir (ours, or HF GPT-2: config.json + model.safetensors or its sharded index) (required)",
         false, OptionTable::bind(c.checkpoint), nullptr});
  t.add({"prompt", "sample", "TEXT", "text the continuation starts from", false, OptionTable::bind(c.prompt),
         [&c] { return c.prompt; }});
  t.add({"tokens", "sample", "N", "tokens to generate", false, OptionTable::bind(c.tokens), [&c] { return std::to_string(c.tokens); }});
  t.add({"temperature", "sample", "F", "softmax temperature; 0: greedy (deterministic)", false, OptionTable::bind(c.temperature),
         [&c] { return std::to_string(c.temperature); }});
  t.add({"top-k", "sample", "N", "sample among the k most likely tokens; 0: all", false, OptionTable::bind(c.top_k),
         [&c] { return std::to_string(c.top_k); }});
  t.add({"seed", "sample", "N", "random seed", false, OptionTable::bind(c.seed), [&c] { return std::to_string(c.seed); }});
  t.add({"device", "sample", runtime::choices_of<Device>(), "where the model runs", false, OptionTable::bind_enum(c.device),
         [&c] { return runtime::to_string(c.device); }});
  if (help) {
    *help = t.help("shardtrain sample --checkpoint DIR --prompt TEXT --tokens N [--temperature F --top-k N]");
    return c;
  }
  t.parse_flags(args);
  if (c.checkpoint.empty()) ST_THROW(UsageError, "sample: --checkpoint DIR is required");
  std::error_code ec;  // the non-throwing overload: a name too long is a usage error too
  if (!std::filesystem::is_directory(c.checkpoint, ec))
    ST_THROW(UsageError, "sample: --checkpoint " << c.checkpoint << " is not a directory"
                                                 << (ec ? " (" + ec.message() + ")" : std::string()));
  if (c.tokens < 0) ST_THROW(UsageError, "sample: --tokens must be >= 0, got " << c.tokens);
  if (c.temperature < 0) ST_THROW(UsageError, "sample: --temperature must be >= 0, got " << c.temperature);
  if (c.top_k < 0) ST_THROW(UsageError, "sample: --top-k must be >= 0, got " << c.top_k);
  return c;
}

int cmd_sample(const std::vector<std::string>& args) {
  if (OptionTable::wants_help(args)) {
    std::string h;
    parse_sample_args(args, &h);
    std::cout << h;
    return 0;
  }
  return runtime::run_sample(parse_sample_args(args, nullptr));
}

}  // namespace st::launch
