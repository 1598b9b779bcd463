// PostQueue: the MPI backend's operations of one communicator, handed to MPI in issue order once
// their staged buffers are ready — so that staging CUDA tensors costs the host no wait at launch.
//
// A CUDA tensor's device → host copy into a pinned block is asynchronous (comm/mpi/host_stage.h):
// the operation is ready once every block it uses has passed its fence (inputs downloaded, blocks
// that MPI or the host will write no longer read by an earlier upload). An operation is posted
// (the host's f32 widening, then the MPI call) at its issue when nothing is queued before it and
// it is ready — always so for CPU tensors — and otherwise queued and posted later, from the polls:
// its Work's, any other Work of the communicator (each poll advances the queue), and every wait
// of the process on any communicator (a poll hook), as the strict p2p queue does.
//
// Order: operations are posted strictly in issue order (a ready operation waits behind an earlier
// one that is not), so every rank hands its collectives to MPI in the order it issued them, and
// point-to-point batches keep their order too. Calls that reach MPI on the communicator outside
// the queue (debug mode's signature exchange, split) flush it first.
#pragma once
#include <deque>
#include <memory>
#include <string>

#include "comm/comm_state.h"
#include "comm/poll_hooks.h"

namespace st::comm::mpi {

// One operation as the queue sees it.
class Postable {
 public:
  virtual ~Postable() = default;
  // Every staged buffer is ready (no wait).
  virtual bool ready() = 0;
  // Hands the operation to MPI (host preparation, then the nonblocking call); throws CommError.
  virtual void post() = 0;
  bool posted = false;  // post() ran, successfully or not
  std::string error;    // its CommError, when it failed later than at issue
};

// The timeout line's note for an operation still queued.
inline constexpr const char* kNotPostedNote =
    "not yet posted to MPI: its staged device-to-host copies (or an earlier operation's on this communicator) "
    "have not finished on the CUDA stream";

class PostQueue final : public PollHook {
 public:
  explicit PostQueue(std::shared_ptr<CommState> state) : state_(std::move(state)) {}
  // Posts `op` now when nothing is queued and it is ready (a failure throws to the caller, as a
  // failed MPI call at issue does), else queues it.
  void issue(const std::shared_ptr<Postable>& op);
  // Posts from the head while ready; never throws: a failure is recorded on its operation and
  // breaks the communicator (later operations could no longer be posted in order).
  void progress();
  void on_poll() override { progress(); }
  bool idle() const { return queue_.empty(); }
  // Until the queue is empty, within `timeout` (TimeoutError naming `what`; the communicator is
  // then broken); CommError if posting failed.
  void flush(Millis timeout, const std::string& what);

 private:
  std::shared_ptr<CommState> state_;
  std::deque<std::shared_ptr<Postable>> queue_;  // issued, not yet posted, in issue order
};

}  // namespace st::comm::mpi
