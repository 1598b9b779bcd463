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
//
// ShardSlice says the same in positions: along the split dim, rank r holds the full tensor's
// positions ranges[0] ++ ranges[1] ++ … (one range per chunk), then zero padding up to `extent`.
// A keyed initialisation (element_map) and a positioned read of a checkpoint (runtime/io) use it
// to produce a shard without the full tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/element_map.h"
#include "tensor/tensor.h"

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

struct DimRange {
  int64_t start = 0, length = 0;
};
struct ShardSlice {
  int64_t dim = 0;                // the split dim (≥ 0); 0 for a replicated tensor
  std::vector<DimRange> ranges;   // full positions held along dim, in local order
  int64_t extent = 0;             // local size along dim (the ranges' total plus padding)
};
// What rank `rank` of `tp` holds of a tensor of full shape `full`. Throws ShapeError naming the
// sizes when the dim (padded if asked) does not divide into chunks · tp. A replicated tensor (or
// a 0-dim one) is one range covering everything.
ShardSlice shard_slice(const ShardSpec& s, const Shape& full, int tp, int rank);
// The ElementMap (tensor/element_map.h) of that slice: local element → full element.
ElementMap element_map(const ShardSlice& slice, const Shape& full);

}  // namespace st::runtime
