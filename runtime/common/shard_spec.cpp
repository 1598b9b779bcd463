#include "runtime/common/shard_spec.h"

#include <algorithm>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {

std::string describe(const ShardSpec& s) {
  if (s.kind == ShardSpec::Kind::replicated) return "replicated";
  std::ostringstream o;
  o << "split dim " << s.dim;
  if (s.chunks > 1) o << " in " << s.chunks << " chunks";
  if (s.pad_to_tp) o << " padded (full size " << s.full_size << ")";
  return o.str();
}

ShardSlice shard_slice(const ShardSpec& s, const Shape& full, int tp, int rank) {
  ShardSlice out;
  if (full.empty()) {  // a scalar: one element, held whole
    out.ranges = {{0, 1}};
    out.extent = 1;
    return out;
  }
  if (s.kind == ShardSpec::Kind::replicated) {
    out.ranges = {{0, full[0]}};
    out.extent = full[0];
    return out;
  }
  ST_CHECK(tp >= 1 && rank >= 0 && rank < tp && s.chunks >= 1 && !(s.pad_to_tp && s.chunks != 1), ValueError,
           "shard: bad spec '" << describe(s) << "' for rank " << rank << " of tp " << tp);
  const int64_t nd = static_cast<int64_t>(full.size());
  out.dim = s.dim < 0 ? s.dim + nd : s.dim;
  ST_CHECK(out.dim >= 0 && out.dim < nd, ShapeError, "shard: dim " << s.dim << " of " << shape_str(full));
  const int64_t size = full[out.dim];
  const int64_t padded = s.pad_to_tp ? (size + tp - 1) / tp * tp : size;
  ST_CHECK(padded % (s.chunks * tp) == 0, ShapeError,
           "shard: dim " << out.dim << " of " << shape_str(full) << " (" << describe(s) << ") does not divide into "
                         << s.chunks << " chunk(s) × tp " << tp);
  const int64_t chunk = padded / s.chunks, piece = chunk / tp;
  for (int64_t j = 0; j < s.chunks; ++j) {
    const int64_t start = j * chunk + rank * piece;
    const int64_t len = std::max<int64_t>(0, std::min(piece, size - start));  // padding past `size`
    if (len > 0) out.ranges.push_back({start, len});
  }
  out.extent = s.chunks * piece;
  return out;
}

ElementMap element_map(const ShardSlice& slice, const Shape& full) {
  ElementMap m;
  if (full.empty()) return ElementMap::whole(1);
  ST_CHECK(static_cast<int>(slice.ranges.size()) <= ElementMap::kMaxRanges, ValueError,
           "element map: " << slice.ranges.size() << " ranges (at most " << ElementMap::kMaxRanges << ")");
  for (int64_t d = 0; d < slice.dim; ++d) m.outer *= full[d];
  for (int64_t d = slice.dim + 1; d < static_cast<int64_t>(full.size()); ++d) m.inner *= full[d];
  m.full = full[slice.dim];
  m.local = slice.extent;
  m.ranges = static_cast<int>(slice.ranges.size());
  for (int k = 0; k < m.ranges; ++k) {
    m.start[k] = slice.ranges[k].start;
    m.length[k] = slice.ranges[k].length;
  }
  return m;
}

}  // namespace st::runtime
