// The decoder's tensor-parallel plan by role (see the header).
#include "models/decoder/decoder_tp_plan.h"

#include <map>
#include <memory>

#include "tensor/error.h"

namespace st::models {

using runtime::ShardRule;
using runtime::ShardSpec;

ShardRule decoder_tp_rule(const DecoderSpec& s) {
  const bool out_in = s.layout == WeightLayout::out_in;
  const int64_t out_dim = out_in ? 0 : -1, in_dim = out_in ? -1 : 0;
  auto roles = std::make_shared<std::map<std::string, ParamRole>>();
  // one block's names stand for all: the rule reads any block index as block 0 (layers may be many)
  for (int64_t i : {int64_t{0}, int64_t{1}, s.layers + 1})
    for (const ParamInfo& p : layer_params(s, i)) (*roles)[p.name] = p.role;
  const std::string first = s.names.block_prefix + "0.", prefix = s.names.block_prefix;
  const int64_t vocab = s.vocab;
  return [roles, first, prefix, vocab, out_dim, in_dim](const std::string& name) -> ShardSpec {
    std::string key = name;
    if (name.compare(0, prefix.size(), prefix) == 0) {  // "<prefix><i>.<rest>" → block 0's name
      const size_t dot = name.find('.', prefix.size());
      if (dot != std::string::npos) {
        const std::string idx = name.substr(prefix.size(), dot - prefix.size());
        const bool digits = !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos;
        if (digits) key = first + name.substr(dot + 1);
      }
    }
    auto it = roles->find(key);
    ST_CHECK(it != roles->end(), ValueError, "tensor parallel: no sharding rule for parameter '" << name << "'");
    switch (it->second) {
      case ParamRole::tok_embed:
      case ParamRole::lm_head: return ShardSpec::split_padded(0, vocab);
      case ParamRole::pos_embed:
      case ParamRole::norm_weight:
      case ParamRole::norm_bias:
      case ParamRole::o_bias:
      case ParamRole::down_bias: return ShardSpec::replicate();
      case ParamRole::qkv_weight: return ShardSpec::split(out_dim, 3);  // [q | k | v], this rank's heads of each
      case ParamRole::qkv_bias: return ShardSpec::split(0, 3);
      case ParamRole::q_weight:
      case ParamRole::k_weight:
      case ParamRole::v_weight:
      case ParamRole::gate_weight:
      case ParamRole::up_weight: return ShardSpec::split(out_dim);  // column-parallel
      case ParamRole::q_bias:
      case ParamRole::k_bias:
      case ParamRole::v_bias:
      case ParamRole::gate_bias:
      case ParamRole::up_bias: return ShardSpec::split(0);
      case ParamRole::o_weight:
      case ParamRole::down_weight: return ShardSpec::split(in_dim);  // row-parallel
    }
    ST_THROW(ValueError, "tensor parallel: no sharding rule for parameter '" << name << "'");
  };
}

}  // namespace st::models
