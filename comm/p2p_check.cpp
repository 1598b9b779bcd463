// The point-to-point order check's message (see p2p_check.h).
#include "comm/p2p_check.h"

#include <sstream>

#include "tensor/dtype.h"

namespace st::comm {
namespace {

std::string shape_of(const Envelope& e, bool truncated, int64_t buffer) {
  std::ostringstream os;
  if (e.count >= 0)
    os << e.count;
  else
    os << "more than " << buffer;
  os << " x " << (e.dtype >= 0 ? dtype_name(static_cast<DType>(e.dtype)) : "?");
  if (truncated) os << ", longer than the buffer: truncated";
  return os.str();
}

}  // namespace

std::string p2p_mismatch(const std::string& who, int me, int peer, const Envelope& want, const Envelope& got,
                         bool truncated) {
  const bool same_size = !truncated && got.count == want.count && got.dtype == want.dtype;
  if (got.tag == want.tag && same_size && (got.index == 0 || got.index == want.index)) return "";
  std::ostringstream os;
  os << "comm error: " << who << ": p2p mismatch with rank " << peer << " (transfer " << want.index << " from rank "
     << peer << " to rank " << me << " in issue order): expected tag " << want.tag << " ("
     << shape_of(want, false, want.count) << "), got tag " << got.tag << " (" << shape_of(got, truncated, want.count)
     << ")";
  if (got.index != 0 && got.index != want.index) os << " sent as transfer " << got.index;
  os << "; transfers between two ranks match in issue order (NCCL, SHARDTRAIN_P2P=strict): rank " << peer
     << " issued its sends to rank " << me << " in another order, or with other sizes, than rank " << me
     << " its receives";
  return os.str();
}

}  // namespace st::comm
