// ShardSpec: how one full tensor splits over the ranks of a tensor-parallel group, and ShardRule:
// the spec of every parameter by its full name. Plain data, below the model (a LanguageModel
// names its rule) and below the sharding code that applies it (runtime/parallel/tp_shard.h).
//
// A ShardSpec says what rank r of tp holds of a full tensor:
//   replicated   the whole tensor
//   split        along `dim`, which holds `chunks` equal consecutive pieces (c_attn's 3C columns
//                are [q | k | v]: chunks = 3); rank r takes slice r of tp equal slices of EACH
//                piece, concatenated in piece order (so its c_attn shard is [q_r | k_r | v_r]).
//                pad_to_tp: the dim is first padded with zeros to a multiple of tp (the
//                vocabulary); gathering cuts it back to full_size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace st::runtime {

struct ShardSpec {
  enum class Kind : uint8_t { replicated, split };
  Kind kind = Kind::replicated;
  int64_t dim = 0;         // split dim (negative counts from the end)
  int64_t chunks = 1;      // equal pieces along dim, each split separately
  bool pad_to_tp = false;  // pad dim with zeros to a multiple of tp (chunks must be 1)
  int64_t full_size = -1;  // with pad_to_tp: the unpadded size along dim (restored by unshard)
  bool operator==(const ShardSpec&) const = default;
  static ShardSpec replicate() { return {}; }
  static ShardSpec split(int64_t dim, int64_t chunks = 1) { return {Kind::split, dim, chunks, false, -1}; }
  static ShardSpec split_padded(int64_t dim, int64_t full_size) { return {Kind::split, dim, 1, true, full_size}; }
};
std::string describe(const ShardSpec& s);  // "split dim 1 ×3 chunks", "replicated", ...

using ShardRule = std::function<ShardSpec(const std::string& name)>;

}  // namespace st::runtime
