// The NCCL backend's tag check (comm/p2p_check.h). NCCL matches point-to-point transfers by their
// issue order per peer and has no tags, so the order is made explicit: every send also sends its
// envelope — tag, element count, dtype, and its 1-based index among this rank's sends to that
// peer — over the communicator's MPI communicator, from the host, when batch_p2p issues it; every
// receive posts an MPI receive for the next envelope from its peer (MPI keeps the order per
// source) and compares it with its own tag, count and dtype. A mismatch is a CommError naming both
// ranks, both tags, group, op and seq, and breaks the communicator (ncclCommAbort). The payloads
// stay in one ncclGroupStart/End per batch_p2p; the envelopes are posted before it.
//
// Why the envelope travels over MPI rather than as an int64 header in the same NCCL group:
//  * cost: one 32-byte MPI message per transfer, posted by the host at issue time — no GPU work,
//    no device memory, no stream synchronisation, no extra NCCL operation. A header in the group
//    costs one more ncclSend/ncclRecv per transfer plus a host→device copy before the group and a
//    device→host copy after it. The receiver's Work completes once the payload is done and its
//    envelope arrived; over shared memory or InfiniBand the envelope (µs) is there long before
//    any payload worth sending over NCCL.
//  * it also catches what a header cannot: given mismatched sizes NCCL may wait forever, so a
//    header behind the payload would never be read. The envelope arrives on its own, and the
//    receiver reports the mismatch (and aborts NCCL) while NCCL is still waiting.
// It is always on: the check costs less than the smallest NCCL transfer.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/p2p_check.h"

namespace st::comm {

class EnvelopeBatch {
 public:
  // Posts the envelopes of `ops` in their issue order on `comm` (the NCCL communicator's MPI
  // communicator). `sent` / `received` (per group rank, the communicator's) count the transfers.
  // `who` names the operation in errors ("rank 1 of 2 in group 'pp', op recv, seq 3").
  static std::shared_ptr<EnvelopeBatch> post(MPI_Comm comm, int me, const std::vector<P2POp>& ops,
                                             std::vector<uint64_t>& sent, std::vector<uint64_t>& received,
                                             std::string who);
  // Tests every envelope; true once all were sent and all received ones checked. Throws CommError
  // on a mismatch or an MPI error.
  bool poll();

 private:
  int me_ = 0;
  std::string who_;
  std::vector<Envelope> out_;   // one per send
  std::vector<Envelope> want_;  // one per receive: what it expects
  std::vector<Envelope> got_;   // one per receive: what arrived
  std::vector<int> from_;       // one per receive: the peer
  std::vector<MPI_Request> reqs_;  // sends' then receives'
  std::vector<char> done_;
};

}  // namespace st::comm
