// AsyncCheckpointer: --async-checkpoint 1 (docs/design.md "Contract: checkpoints"). At a step
// boundary the training thread takes the snapshot (runtime/train/train_checkpoint.h: this rank's
// share copied to host memory — from CUDA through one device block and pinned memory — through
// the plans kept from the first save, runtime/train/snapshot_plans.h; a save that builds them
// also makes the temporary directory; every collective on this thread); then the background
// thread (one for the run, runtime/train/writer_thread.h; it makes a later save's temporary
// directory first) writes and fsyncs this rank's files while training goes on. At most one save
// is in flight. Every rank calls poll() at the same step boundaries while one is (the trainer:
// after every step), which exchanges each rank's state over the world (one small all-reduce): when
// every writer finished, rank 0 commits (indexes, config.json, state.json, the one rename,
// retention) on its background thread, and a later exchange ends the save; when any rank's work
// failed, every rank throws the same IOError naming the lowest failed rank and its cause, so no
// rank hangs and the job ends with one line. A crash before the rename leaves the previous
// checkpoint the newest. The background thread makes no collective call and touches no tensor (MPI
// is initialised FUNNELED; the CUDA copies were queued by the training thread, which also frees
// the device copies).
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/writer_thread.h"

namespace st::runtime {

class AsyncCheckpointer {
 public:
  // `world`: every rank (null or one rank: no exchange); `keep`: --keep-checkpoints;
  // `crash_before_commit`: TrainSeams' (every rank throws before the rename); `between_parts`:
  // TrainSeams::checkpoint_writer (called on the writer's thread after the model file; null: none).
  AsyncCheckpointer(std::shared_ptr<comm::Communicator> world, int64_t keep, bool crash_before_commit,
                    std::function<void(int64_t step, int rank)> between_parts = nullptr);
  ~AsyncCheckpointer();  // waits for a writer still running (an error path: its .tmp-* stays, ignored)
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  bool in_flight() const { return in_flight_; }
  // The plans and host memory the next snapshot is taken through (kept from one save to the next).
  SnapshotPlans& plans() { return plans_; }
  // Starts the writer of `snap` (none in flight: poll(true) first).
  void start(CheckpointSnapshot snap);
  // Collective over the world while a save is in flight (a no-op otherwise): every rank's state is
  // exchanged; once every writer finished, rank 0 commits in the background (indexes,
  // config.json, state.json, the rename, retention), and the next exchange that sees it done ends
  // the save. `wait` (the next save is due, the run ends): this rank's work is joined first, so
  // the save is over on return. Throws IOError when any rank's writer (or rank 0's commit) failed.
  // True when the save ended here (committed).
  bool poll(bool wait);

 private:
  enum : int64_t { kRunning = 0, kDone = 1, kFailed = 2 };
  [[noreturn]] void fail(int rank);  // every rank: the failed rank's cause, broadcast from it
  void run_in_background(std::function<void()> work);  // on writer_, its outcome in state_ / error_
  std::vector<int64_t> exchange();   // every rank's state_ (collective); throws through fail()

  std::shared_ptr<comm::Communicator> world_;
  int64_t keep_;
  bool crash_before_commit_;
  std::function<void(int64_t, int)> between_parts_;
  SnapshotPlans plans_;
  CheckpointSnapshot snap_;
  bool in_flight_ = false;
  bool committing_ = false;  // every writer finished; rank 0's commit runs (or ran)
  std::atomic<int64_t> state_{kRunning};
  std::string error_;  // the writer's cause (read after state_ says kFailed)
  WriterThread writer_;  // last: its job (which reads the members above) ends before they go
};

}  // namespace st::runtime
