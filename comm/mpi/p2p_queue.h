// The MPI backend's point-to-point transfers, in the mode the communicator was created with
// (CommOptions::p2p, see comm/README.md "Point to point"):
//  * default: a batch is posted at once (receives first, then MPI_Isend); MPI matches by
//    (peer, tag) and buffers small sends, so orders that deadlock on NCCL may pass here.
//  * strict: NCCL's semantics, so that what would deadlock or mismatch on NCCL fails here too:
//    - sends are synchronous (MPI_Issend): complete only once the matching receive is posted;
//    - the communicator's batches run one at a time in issue order (NCCL's comm stream): a batch
//      is posted only after the previous one completed, so two ranks that each wait on a send
//      before posting their receive deadlock — and end at the deadline with TimeoutError;
//    - receives take MPI_ANY_TAG from their peer, so MPI's non-overtaking rule matches them in
//      issue order, and the matched message's tag and size are checked against the receive's
//      (p2p_check.h): a mismatch or a longer message (MPI_ERR_TRUNCATE) is a CommError naming
//      both ranks, both tags, the group, op and seq, and breaks the communicator.
// In both modes every request is tested on its own (MPI_Test), so a failed receive is reported
// with its peer, tag and buffer at once, e.g. a truncation in default mode.
// Queued strict batches also progress while the process waits on any other communicator (a poll
// hook): NCCL's streams progress on their own.
#pragma once
#include <mpi.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/host_stage.h"
#include "comm/mpi/post_queue.h"

namespace st::comm::mpi {

// One batch_p2p call as MPI sees it; outlives its Work if the Work is abandoned.
struct P2PBatch {
  struct Transfer {
    bool recv = false;
    int peer = 0;
    int tag = 0;
    int count = 0;
    DType dtype = DType::f32;
    uint64_t index = 0;   // receives: 1-based, per peer over the communicator's life
    void* buf = nullptr;  // what MPI reads or writes (the tensor's memory or a staging block)
  };
  std::string op;   // "send", "recv", "batch_p2p"
  uint64_t seq = 0;
  std::string who;  // "rank 1 of 2 in group 'pp', op recv, seq 3"
  bool strict = false;
  std::vector<Transfer> transfers;
  std::vector<MPI_Request> reqs;
  std::vector<char> done;
  std::vector<Tensor> keep;     // the caller's tensors
  std::vector<Staged> staged;   // staging blocks (leases)
  std::function<void()> after;  // staged receives → their CUDA tensors
  bool posted = false;
  bool complete = false;
  std::string error;  // the first failure; the communicator is broken then
};

class P2PQueue final : public PollHook {
 public:
  P2PQueue(MPI_Comm comm, std::shared_ptr<CommState> state);
  // Default: posts `b` now. Strict: appends it and posts what may be posted.
  void issue(const std::shared_ptr<P2PBatch>& b);
  // Progress, then true once `b` completed; throws CommError when `b` failed.
  bool poll(P2PBatch& b);
  void on_poll() override;  // strict batches; failures are recorded on their batch
  // Strict: "queued behind send seq 0, ..." while `b` is not posted; else "".
  std::string pending_note(const P2PBatch& b) const;
  bool idle() const { return queue_.empty(); }

 private:
  void progress();
  void post(P2PBatch& b);
  void test(P2PBatch& b);
  void fail(P2PBatch& b, const std::string& msg);
  MPI_Comm comm_;
  std::shared_ptr<CommState> state_;
  std::deque<std::shared_ptr<P2PBatch>> queue_;  // strict batches not yet complete, in issue order
  std::vector<uint64_t> recv_index_;            // receives issued per peer
};

// The Work of a batch on `queue`, handed to it by `posted` in the communicator's `posts` once its
// staged sends are on the host (comm/mpi/post_queue.h).
WorkPtr make_p2p_work(std::shared_ptr<CommState> state, std::string op, uint64_t seq,
                      std::shared_ptr<P2PQueue> queue, std::shared_ptr<P2PBatch> batch,
                      std::shared_ptr<PostQueue> posts, std::shared_ptr<Postable> posted);

}  // namespace st::comm::mpi
