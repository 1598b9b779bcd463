// The MPI backend's operations posted in issue order once their staging is ready (see post_queue.h).
#include "comm/mpi/post_queue.h"

#include <chrono>
#include <iomanip>
#include <sstream>

#include "comm/poll.h"
#include "comm/poll_hooks.h"
#include "tensor/error.h"

namespace st::comm::mpi {

void PostQueue::issue(const std::shared_ptr<Postable>& op) {
  if (queue_.empty() && op->ready()) {
    op->posted = true;
    op->post();
    return;
  }
  queue_.push_back(op);
  progress();
}

void PostQueue::progress() {
  while (!queue_.empty() && !state_->broken()) {
    Postable& head = *queue_.front();
    try {
      if (!head.ready()) return;
      head.posted = true;
      head.post();
    } catch (const std::exception& e) {
      head.posted = true;
      head.error = e.what();
      state_->mark_broken(head.error);
    }
    queue_.pop_front();
  }
}

void PostQueue::flush(Millis timeout, const std::string& what) {
  const bool done = poll_until(std::chrono::steady_clock::now() + timeout, [&] {
    progress();
    if (state_->broken()) ST_THROW(CommError, "comm error: " << what << ": communicator is broken: " << state_->broken_reason());
    if (queue_.empty()) return true;
    run_poll_hooks();
    return false;
  });
  if (done) return;
  std::ostringstream os;
  os << "comm timeout: " << what << ": operations issued before it were not posted within " << std::fixed
     << std::setprecision(1) << std::chrono::duration<double>(timeout).count()
     << " s (their device-to-host copies did not finish)";
  state_->mark_broken(os.str());
  throw TimeoutError(os.str());
}

}  // namespace st::comm::mpi
