#include "runtime/parallel/zero1.h"

#include <algorithm>
#include <chrono>

#include "runtime/common/partition.h"
#include "runtime/common/timing.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {

Zero1::Zero1(NamedTensors params, std::shared_ptr<comm::Communicator> dp) : params_(std::move(params)), dp_(std::move(dp)) {
  if (!dp_) ST_THROW(ValueError, "Zero1: no communicator");
  if (params_.empty()) ST_THROW(ValueError, "Zero1: no parameters");
  const int n = static_cast<int>(params_.size()), size = dp_->size(), rank = dp_->rank();
  const Tensor& p0 = params_.front().second;
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto& [name, p] = params_[k];
    if (!p.defined()) ST_THROW(ValueError, "Zero1: parameter '" << name << "' is undefined");
    if (p.dtype() != p0.dtype())
      ST_THROW(DTypeError, "Zero1: parameter '" << name << "' is " << p.describe() << ", '" << params_.front().first
                                                << "' is " << p0.describe() << " (one dtype for all)");
    if (p.device() != p0.device())
      ST_THROW(DeviceError, "Zero1: parameter '" << name << "' is on another device than '" << params_.front().first << "'");
    if (!index_.emplace(name, k).second) ST_THROW(ValueError, "Zero1: parameter name '" << name << "' appears twice");
  }

  // Contiguous runs balanced by bytes; fewer parameters than ranks: one each, the rest none.
  first_.assign(static_cast<size_t>(size) + 1, n);
  if (n >= size) {
    std::vector<double> costs;
    for (auto& [name, p] : params_) costs.push_back(static_cast<double>(p.nbytes()));
    Partition part = partition_balanced(costs, size);
    for (int r = 0; r < size; ++r) first_[static_cast<size_t>(r)] = part.begin(r);
  } else {
    for (int r = 0; r < size; ++r) first_[static_cast<size_t>(r)] = std::min(r, n);
  }
  owner_of_.assign(static_cast<size_t>(n), 0);
  offsets_.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < size; ++r) {
    int64_t run = 0;
    for (int k = begin(r); k < end(r); ++k) {
      owner_of_[static_cast<size_t>(k)] = r;
      offsets_[static_cast<size_t>(k)] = run;
      run += params_[static_cast<size_t>(k)].second.numel();
    }
    S_ = std::max(S_, run);
  }
  for (int k = begin(rank); k < end(rank); ++k) owned_.push_back(params_[static_cast<size_t>(k)]);
}

bool Zero1::owns(const std::string& name) const { return owner(name) == dp_->rank(); }

int Zero1::owner(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) ST_THROW(ValueError, "Zero1: unknown parameter '" << name << "'");
  return owner_of_[it->second];
}

Tensor Zero1::chunk(const Tensor& flat, int rank) const { return flat.narrow(0, rank * S_, S_); }

void Zero1::zero_grad() {
  NoGradGuard ng;
  const Tensor& p0 = params_.front().second;
  if (!grads_.defined() || grads_.dtype() != p0.dtype() || grads_.device() != p0.device()) {
    const int64_t n = dp_->size() * S_;
    grads_ = Tensor::zeros({n}, p0.dtype(), p0.device());   // (dp·S,)
    values_ = Tensor::zeros({n}, p0.dtype(), p0.device());  // (dp·S,)
  }
  grads_.fill_(0.0);
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor& p = params_[k].second;
    const int64_t at = owner_of_[k] * S_ + offsets_[k];
    p.set_grad(grads_.narrow(0, at, p.numel()).view(p.shape()));
  }
}

void Zero1::reduce_scatter() {
  ST_CHECK(grads_.defined(), ValueError, "Zero1::reduce_scatter before the first zero_grad()");
  if (dp_->size() == 1) return;  // the local gradient is the sum
  NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  // in place: grads_ (dp·S,) → this rank's chunk (S,)
  dp_->reduce_scatter(grads_, chunk(grads_, dp_->rank()), comm::ReduceOp::sum)->wait();
  stats_.reduce_ms += ms_since(t0);
  stats_.bytes_reduced += static_cast<int64_t>(grads_.nbytes());
}

void Zero1::all_gather() {
  ST_CHECK(values_.defined(), ValueError, "Zero1::all_gather before the first zero_grad()");
  if (dp_->size() == 1) return;  // every parameter is owned here
  NoGradGuard ng;
  const int rank = dp_->rank();
  for (int k = begin(rank); k < end(rank); ++k) {
    const Tensor& p = params_[static_cast<size_t>(k)].second;
    values_.narrow(0, rank * S_ + offsets_[static_cast<size_t>(k)], p.numel()).view(p.shape()).copy_(p.detach());
  }
  auto t0 = std::chrono::steady_clock::now();
  // in place: this rank's chunk (S,) → values_ (dp·S,)
  dp_->all_gather(chunk(values_, rank), values_)->wait();
  stats_.gather_ms += ms_since(t0);
  stats_.bytes_gathered += static_cast<int64_t>(values_.nbytes());
  for (size_t k = 0; k < params_.size(); ++k) {
    if (owner_of_[k] == rank) continue;
    Tensor p = params_[k].second.detach();
    p.copy_(values_.narrow(0, owner_of_[k] * S_ + offsets_[k], p.numel()).view(p.shape()));
  }
}

}  // namespace st::runtime
