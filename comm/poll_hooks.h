// Poll hooks: work that must go on while any wait of this process polls, whichever communicator
// it is on — the side channels' answers (comm/side_channel.h), the MPI backend's post queues and
// strict-mode p2p queues (comm/mpi/). Every deadline-bounded wait (Work::wait, mpi_wait_deadline,
// the side channel's own windows) calls run_poll_hooks between its polls.
#pragma once
#include <chrono>
#include <memory>

namespace st::comm {

class PollHook {
 public:
  virtual ~PollHook() = default;
  virtual void on_poll() = 0;  // never throws
};
// Hooks are held weakly: one whose owner is gone is dropped.
void register_poll_hook(std::weak_ptr<PollHook> hook);
// Runs every live hook, at most once a millisecond unless `force` (expired ones are dropped).
void run_poll_hooks(bool force = false);
// Runs the hooks every millisecond for `duration` (sleeping between runs): a rank that has nothing left
// to do but must keep answering its peers, e.g. after a deadline while another rank reports.
void run_poll_hooks_for(std::chrono::milliseconds duration);

}  // namespace st::comm
