// AsyncCheckpointer (see the header): the writer thread, the per-boundary exchange of the
// writers' states, the commit and the one error every rank throws.
#include "runtime/train/async_checkpoint.h"

#include <algorithm>
#include <vector>

namespace st::runtime {
namespace {

// NCCL reduces device tensors only (as Trainer::reduce_step_metrics).
Tensor on_comm_device(const Tensor& t, const comm::Communicator& world) {
  return std::string(world.backend()) == "nccl" ? t.to(Device::cuda) : t;
}

constexpr int64_t kCauseChars = 1024;  // the cause broadcast from the failed rank, cut to this

}  // namespace

AsyncCheckpointer::AsyncCheckpointer(std::shared_ptr<comm::Communicator> world, int64_t keep,
                                     bool crash_before_commit, std::function<void(int64_t, int)> between_parts)
    : world_(std::move(world)),
      keep_(keep),
      crash_before_commit_(crash_before_commit),
      between_parts_(std::move(between_parts)) {}

AsyncCheckpointer::~AsyncCheckpointer() { writer_.wait(); }

void AsyncCheckpointer::start(CheckpointSnapshot snap) {
  ST_CHECK(!in_flight_, Error, "AsyncCheckpointer: a save of step " << snap_.state.step << " is still in flight");
  snap_ = std::move(snap);
  in_flight_ = true;
  committing_ = false;
  const int rank = world_ ? world_->rank() : 0;
  run_in_background([this, rank] {
    make_snapshot_temp(snap_);  // a later save's directory: made here, not at the step boundary
    write_snapshot(snap_.tmp, *snap_.model);
    if (between_parts_) between_parts_(snap_.state.step, rank);
    write_snapshot(snap_.tmp, *snap_.optimizer);
  });
}

void AsyncCheckpointer::run_in_background(std::function<void()> work) {
  writer_.wait();
  state_.store(kRunning);
  error_.clear();
  writer_.run([this, work = std::move(work)] {
    try {
      work();
      state_.store(kDone);
    } catch (const std::exception& e) {
      error_ = e.what();
      state_.store(kFailed);
    } catch (...) {
      error_ = "unknown exception";
      state_.store(kFailed);
    }
  });
}

std::vector<int64_t> AsyncCheckpointer::exchange() {
  const int n = world_ ? world_->size() : 1, rank = world_ ? world_->rank() : 0;
  std::vector<int64_t> states(static_cast<size_t>(n), 0);
  states[static_cast<size_t>(rank)] = state_.load();
  if (n > 1) {
    // every rank's state in its slot: the sum is every state (one small all-reduce per boundary)
    Tensor t = on_comm_device(Tensor::from_vector(states, {n}), *world_);  // (world)
    world_->all_reduce(t, comm::ReduceOp::sum)->wait();
    const Tensor all = t.to(Device::cpu);
    states.assign(all.data<int64_t>(), all.data<int64_t>() + n);
  }
  for (int r = 0; r < n; ++r)
    if (states[static_cast<size_t>(r)] == kFailed) fail(r);
  return states;
}

bool AsyncCheckpointer::poll(bool wait) {
  if (!in_flight_) return false;
  for (;;) {
    if (wait) writer_.wait();
    const std::vector<int64_t> states = exchange();
    if (std::any_of(states.begin(), states.end(), [](int64_t s) { return s == kRunning; })) return false;
    writer_.wait();
    if (committing_) {  // rank 0 renamed: the save is over
      in_flight_ = false;
      return true;
    }
    // every rank's files are written and fsynced: the device copies go, and rank 0 commits in the
    // background (indexes, config.json, state.json, the rename, retention); the others have
    // nothing left to do
    plans_.release();
    if (crash_before_commit_) {
      in_flight_ = false;
      ST_THROW(Error, "test seam crash_before_commit (SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT): stopping before the rename of "
                          << snap_.tmp);
    }
    committing_ = true;
    if (snap_.lead)
      run_in_background([this] { commit_train_checkpoint(snap_, keep_); });
    else
      state_.store(kDone);
    if (!wait) return false;
  }
}

void AsyncCheckpointer::fail(int failed) {
  writer_.wait();
  in_flight_ = false;
  const char* what = committing_ ? "the commit" : "the writer";
  plans_.release();
  const int n = world_ ? world_->size() : 1, rank = world_ ? world_->rank() : 0;
  std::string cause = error_;
  if (n > 1) {  // the failed rank's cause, so every rank throws the same line (printed once)
    std::vector<int32_t> chars(static_cast<size_t>(kCauseChars), 0);
    if (rank == failed)
      for (size_t i = 0; i < cause.size() && i < chars.size(); ++i) chars[i] = static_cast<unsigned char>(cause[i]);
    Tensor t = on_comm_device(Tensor::from_vector(chars, {kCauseChars}), *world_);  // (kCauseChars)
    world_->broadcast(t, failed)->wait();
    const Tensor got = t.to(Device::cpu);
    cause.clear();
    for (int64_t i = 0; i < kCauseChars && got.data<int32_t>()[i] != 0; ++i)
      cause += static_cast<char>(got.data<int32_t>()[i]);
  }
  ST_THROW(IOError, "asynchronous checkpoint of step " << snap_.state.step << ": " << what << " of rank " << failed
                                                       << " failed: " << cause);
}

}  // namespace st::runtime
