// The point-to-point order check shared by the NCCL backend and the MPI backend's strict mode: the
// k-th transfer from rank a to rank b (counted per direction over the communicator's life) must be
// b's k-th receive from a, with the same tag, element count and dtype. NCCL matches transfers by
// exactly that order and has no tags; these checks make the order explicit, so a program whose
// ranks disagree gets a CommError naming both ranks, both tags, the group, op and seq instead of a
// payload in the wrong buffer or a hang.
#pragma once
#include <cstdint>
#include <string>

namespace st::comm {

// What a transfer is, on either side: the sender's (NCCL: sent to the receiver over MPI) and the
// receiver's expectation. dtype is a DType value; index is 1-based, per (sender, receiver).
struct Envelope {
  int64_t tag = -1;
  int64_t count = -1;  // elements; -1: unknown (more than the receiver's buffer held)
  int64_t dtype = -1;
  int64_t index = 0;
};

// "" when `got` is what the receiver (`who`, e.g. "rank 1 of 2 in group 'pp', op recv, seq 3",
// group rank `me`) expected from group rank `peer`, else the CommError line:
//   "comm error: rank 1 of 2 in group 'pp', op recv, seq 3: p2p mismatch with rank 0 (transfer 4
//    from rank 0 to rank 1 in issue order): expected tag 5 (4 x f32), got tag 4 (8 x f32) ..."
// `truncated`: the message was longer than the buffer (got.count may then be -1).
std::string p2p_mismatch(const std::string& who, int me, int peer, const Envelope& want, const Envelope& got,
                         bool truncated);

}  // namespace st::comm
