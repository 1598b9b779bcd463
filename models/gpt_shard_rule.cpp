#include "models/gpt_shard_rule.h"

#include <string>

#include "tensor/error.h"

namespace st::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

using runtime::ShardRule;
using runtime::ShardSpec;

ShardRule gpt_tp_shard_rule(int64_t vocab_size) {
  return [vocab_size](const std::string& n) -> ShardSpec {
    if (n == "transformer.wte.weight") return ShardSpec::split_padded(0, vocab_size);
    if (n == "transformer.wpe.weight" || ends_with(n, ".ln_1.weight") || ends_with(n, ".ln_1.bias") ||
        ends_with(n, ".ln_2.weight") || ends_with(n, ".ln_2.bias") || n == "transformer.ln_f.weight" ||
        n == "transformer.ln_f.bias")
      return ShardSpec::replicate();
    if (ends_with(n, ".attn.c_attn.weight")) return ShardSpec::split(-1, 3);  // (C, 3C) [q | k | v]
    if (ends_with(n, ".attn.c_attn.bias")) return ShardSpec::split(0, 3);     // (3C)
    if (ends_with(n, ".mlp.c_fc.weight")) return ShardSpec::split(-1);        // (C, 4C) columns
    if (ends_with(n, ".mlp.c_fc.bias")) return ShardSpec::split(0);           // (4C)
    if (ends_with(n, ".attn.c_proj.weight") || ends_with(n, ".mlp.c_proj.weight")) return ShardSpec::split(0);  // rows
    if (ends_with(n, ".attn.c_proj.bias") || ends_with(n, ".mlp.c_proj.bias")) return ShardSpec::replicate();
    ST_THROW(ValueError, "tensor parallel: no sharding rule for GPT parameter '" << n << "'");
  };
}

}  // namespace st::models
