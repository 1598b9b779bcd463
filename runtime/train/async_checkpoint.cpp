// AsyncCheckpointer (see the header): the writer thread, the per-boundary exchange of the
// writers' states, the commit and the one error every rank throws.
#include "runtime/train/async_checkpoint.h"

#include <algorithm>
#include <vector>

namespace st::runtime {
namespace {

// NCCL reduces device tensors only (as Trainer::largest_memory).
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
      between_parts_(std::move(between_parts)),
      model_host_(std::make_shared<HostStaging>()),
      optimizer_host_(std::make_shared<HostStaging>()) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointer::start(CheckpointSnapshot snap) {
  ST_CHECK(!in_flight_, Error, "AsyncCheckpointer: a save of step " << snap_.state.step << " is still in flight");
  snap_ = std::move(snap);
  in_flight_ = true;
  state_.store(kRunning);
  error_.clear();
  const int rank = world_ ? world_->rank() : 0;
  writer_ = std::thread([this, rank] {
    try {
      write_snapshot(snap_.tmp, snap_.model);
      if (between_parts_) between_parts_(snap_.state.step, rank);
      write_snapshot(snap_.tmp, snap_.optimizer);
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

std::string AsyncCheckpointer::poll(bool wait) {
  if (!in_flight_) return "";
  if (wait && writer_.joinable()) writer_.join();
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
  if (std::any_of(states.begin(), states.end(), [](int64_t s) { return s == kRunning; })) return "";
  if (writer_.joinable()) writer_.join();
  in_flight_ = false;  // whatever the commit does, this save is over
  model_host_->release();  // the device copies of a CUDA snapshot go (this thread made them)
  optimizer_host_->release();
  return commit_train_checkpoint(snap_, keep_, crash_before_commit_);
}

void AsyncCheckpointer::fail(int failed) {
  if (writer_.joinable()) writer_.join();
  in_flight_ = false;
  model_host_->release();
  optimizer_host_->release();
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
  ST_THROW(IOError, "asynchronous checkpoint of step " << snap_.state.step << ": the writer of rank " << failed
                                                       << " failed: " << cause);
}

}  // namespace st::runtime
