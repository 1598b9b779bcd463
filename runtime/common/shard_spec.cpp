#include "runtime/common/shard_spec.h"

#include <sstream>

namespace st::runtime {

std::string describe(const ShardSpec& s) {
  if (s.kind == ShardSpec::Kind::replicated) return "replicated";
  std::ostringstream o;
  o << "split dim " << s.dim;
  if (s.chunks > 1) o << " in " << s.chunks << " chunks";
  if (s.pad_to_tp) o << " padded (full size " << s.full_size << ")";
  return o.str();
}

}  // namespace st::runtime
