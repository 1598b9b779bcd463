#include "runtime/parallel/zero1.h"

#include <algorithm>
#include <deque>

#include "runtime/common/partition.h"
#include "runtime/common/timing.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

// Checks the list and cuts it: (dp + 1) run starts, rank r owning [first[r], first[r+1]).
std::vector<int> cut_runs(const NamedTensors& params, const comm::Communicator* dp) {
  if (!dp) ST_THROW(ValueError, "Zero1: no communicator");
  if (params.empty()) ST_THROW(ValueError, "Zero1: no parameters");
  const int n = static_cast<int>(params.size()), size = dp->size();
  const Tensor& p0 = params.front().second;
  for (const auto& [name, p] : params) {
    if (!p.defined()) ST_THROW(ValueError, "Zero1: parameter '" << name << "' is undefined");
    if (p.dtype() != p0.dtype())
      ST_THROW(DTypeError, "Zero1: parameter '" << name << "' is " << p.describe() << ", '" << params.front().first
                                                << "' is " << p0.describe() << " (one dtype for all)");
    if (p.device() != p0.device())
      ST_THROW(DeviceError, "Zero1: parameter '" << name << "' is on another device than '" << params.front().first << "'");
  }
  // Contiguous runs balanced by bytes; fewer parameters than ranks: one each, the rest none.
  std::vector<int> first(static_cast<size_t>(size) + 1, n);
  if (n >= size) {
    std::vector<double> costs;
    for (const auto& [name, p] : params) costs.push_back(static_cast<double>(p.nbytes()));
    const Partition part = partition_balanced(costs, size);
    for (int r = 0; r < size; ++r) first[static_cast<size_t>(r)] = part.begin(r);
  } else {
    for (int r = 0; r < size; ++r) first[static_cast<size_t>(r)] = std::min(r, n);
  }
  return first;
}

std::vector<int> owners(const std::vector<int>& first, size_t n) {
  std::vector<int> out(n, 0);
  for (size_t r = 0; r + 1 < first.size(); ++r)
    for (int k = first[r]; k < first[r + 1]; ++k) out[static_cast<size_t>(k)] = static_cast<int>(r);
  return out;
}

// Buckets never straddle two owners, and each is reduced to its owner.
ReducerOptions with_segments(ReducerOptions o, const std::vector<int>& owner_of) {
  o.segment = owner_of;
  o.reduce_to_segment = true;
  return o;
}

}  // namespace

Zero1::Zero1(NamedTensors params, std::shared_ptr<comm::Communicator> dp, ReducerOptions options)
    : params_(std::move(params)),
      dp_(std::move(dp)),
      first_(cut_runs(params_, dp_.get())),
      owner_of_(owners(first_, params_.size())),
      reducer_(params_, dp_, with_segments(std::move(options), owner_of_)) {
  for (size_t k = 0; k < params_.size(); ++k)
    if (!index_.emplace(params_[k].first, k).second)
      ST_THROW(ValueError, "Zero1: parameter name '" << params_[k].first << "' appears twice");
  const int rank = dp_->rank();
  for (int k = begin(rank); k < end(rank); ++k) owned_.push_back(params_[static_cast<size_t>(k)]);
}

bool Zero1::owns(const std::string& name) const { return owner(name) == dp_->rank(); }

int Zero1::owner(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) ST_THROW(ValueError, "Zero1: unknown parameter '" << name << "'");
  return owner_of_[it->second];
}

int64_t Zero1::owned_numel(int rank) const {
  int64_t n = 0;
  for (int k = begin(rank); k < end(rank); ++k) n += params_[static_cast<size_t>(k)].second.numel();
  return n;
}

void Zero1::zero_grad() {
  // The host sees the last step's broadcasts complete (the stream already waited for them).
  for (const comm::WorkPtr& w : broadcasts_) w->wait();
  broadcasts_.clear();
  reducer_.zero_grad();
  reducer_.set_sync(false);
}

void Zero1::broadcast_updates() {
  if (dp_->size() == 1 || reducer_.skips_comm()) return;  // one rank owns everything / the test hook
  NoGradGuard ng;
  const Clock::time_point t0 = Clock::now();
  const int rank = dp_->rank();
  const int64_t buckets = reducer_.num_buckets();
  auto view = [&](const Tensor& flat, size_t k) {
    const Tensor& p = params_[k].second;
    return flat.narrow(0, reducer_.offset_in_bucket(k), p.numel()).view(p.shape());
  };
  // ZeRO-1: every bucket's broadcast in flight at once, each in its gradient buffer. ZeRO-2: a
  // bucket of another owner has no buffer, so it receives into one of its own, and at most
  // kShardWindow of those exist at once (the oldest is unpacked and freed first).
  const bool windowed = reducer_.options().shard_gradients;
  std::vector<comm::WorkPtr> works(static_cast<size_t>(buckets));
  std::vector<Tensor> bufs(static_cast<size_t>(buckets));  // (numel,) each, while in flight
  std::deque<int64_t> open;
  auto unpack = [&](int64_t i) {
    works[static_cast<size_t>(i)]->wait_on_stream();  // the copies out queue behind it (a host wait on MPI)
    Tensor& flat = bufs[static_cast<size_t>(i)];
    if (owner_of_[reducer_.bucket_params(i).front()] != rank)
      for (size_t k : reducer_.bucket_params(i)) {
        Tensor p = params_[k].second.detach();
        p.copy_(view(flat, k));
      }
    flat = Tensor();
  };
  for (int64_t i = 0; i < buckets; ++i) {  // every rank in bucket order
    Tensor flat = reducer_.bucket_buffer(i);  // (numel,): the bucket's gradients, now its values
    const size_t k0 = reducer_.bucket_params(i).front();
    if (!flat.defined()) flat = Tensor::empty({reducer_.bucket_numel(i)}, params_[k0].second.dtype(), params_[k0].second.device());
    const int owner = owner_of_[k0];
    if (owner == rank)
      for (size_t k : reducer_.bucket_params(i)) view(flat, k).copy_(params_[k].second.detach());
    works[static_cast<size_t>(i)] = dp_->broadcast(flat, owner);
    bufs[static_cast<size_t>(i)] = flat;
    stats_.bytes_broadcast += static_cast<int64_t>(flat.nbytes());
    open.push_back(i);
    if (windowed && open.size() > kShardWindow) {
      unpack(open.front());
      open.pop_front();
    }
  }
  for (int64_t i : open) unpack(i);
  broadcasts_ = std::move(works);  // the host sees them complete at the next zero_grad()
  ++stats_.broadcasts;
  stats_.broadcast_ms += ms_since(t0);
}

}  // namespace st::runtime
