#include "runtime/parallel/grad_reducer.h"

#include "runtime/common/timing.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"

namespace st::runtime {

GradReducer::GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<comm::Communicator> group,
                         ReducerOptions options)
    : params_(std::move(params)), group_(std::move(group)), options_(options), alive_(std::make_shared<bool>(true)) {
  if (!group_) ST_THROW(ValueError, "GradReducer: no communicator");
  const size_t n = params_.size();
  ready_.assign(n, false);
  for (auto& [name, p] : params_) shapes_.push_back(p.shape());
  std::weak_ptr<bool> alive = alive_;
  for (size_t k = 0; k < n; ++k) {
    params_[k].second.add_grad_ready_hook([this, k, alive](const Tensor&) {
      if (alive.lock()) on_grad_ready(k);
    });
  }
}

bool GradReducer::layout_is_current() const {
  if (buckets_.empty()) return params_.empty();
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].second;
    const Tensor& flat = buckets_[bucket_of_[k]].flat;
    if (p.dtype() != flat.dtype() || p.device() != flat.device()) return false;
  }
  return true;
}

void GradReducer::lay_out() {
  if (layout_is_current()) return;
  const size_t n = params_.size();
  buckets_.clear();
  bucket_of_.assign(n, 0);
  offsets_.assign(n, 0);
  // Reverse registration order; a bucket holds one dtype and device.
  std::vector<std::vector<size_t>> groups;
  size_t bytes = 0, cap = options_.first_bucket_bytes;
  for (size_t k = n; k-- > 0;) {
    const Tensor& p = params_[k].second;
    bool fits = !groups.empty() && bytes + p.nbytes() <= cap &&
                params_[groups.back().front()].second.dtype() == p.dtype() &&
                params_[groups.back().front()].second.device() == p.device();
    if (!fits) {
      if (!groups.empty()) cap = options_.bucket_bytes;
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += p.nbytes();
  }
  for (auto& g : groups) {
    Bucket b;
    int64_t numel = 0;
    for (size_t k : g) {
      bucket_of_[k] = buckets_.size();
      offsets_[k] = numel;
      numel += params_[k].second.numel();
    }
    const Tensor& p0 = params_[g.front()].second;
    b.flat = Tensor::zeros({numel}, p0.dtype(), p0.device());
    if (options_.comm_dtype != p0.dtype()) b.comm_buf = Tensor::empty({numel}, options_.comm_dtype, p0.device());
    b.params = g;
    buckets_.push_back(std::move(b));
  }
}

GradReducer::~GradReducer() {
  alive_.reset();
  for (auto& [name, p] : params_) p.clear_grad_ready_hooks();
}

int64_t GradReducer::num_buckets() {
  lay_out();
  return static_cast<int64_t>(buckets_.size());
}

std::vector<std::string> GradReducer::bucket_names(int64_t i) {
  lay_out();
  std::vector<std::string> names;
  for (size_t k : buckets_.at(static_cast<size_t>(i)).params) names.push_back(params_[k].first);
  return names;
}

void GradReducer::zero_grad() {
  lay_out();
  NoGradGuard ng;
  for (auto& b : buckets_) {
    b.flat.fill_(0.0);
    b.launched = false;
    b.work.reset();
    b.pending = static_cast<int>(b.params.size());
    for (size_t k : b.params) {
      Tensor view = b.flat.narrow(0, offsets_[k], params_[k].second.numel()).view(shapes_[k]);
      params_[k].second.set_grad(view);
      ready_[k] = false;
    }
  }
  next_launch_ = 0;
}

void GradReducer::set_sync(bool on) { sync_ = on; }

void GradReducer::on_grad_ready(size_t k) {
  if (!sync_ || ready_[k] || buckets_.empty()) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) launch_ready_in_order();
  poll_in_flight();
}

void GradReducer::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void GradReducer::launch(Bucket& b) {
  if (group_->size() == 1) {  // nothing to reduce
    b.launched = true;
    return;
  }
  NoGradGuard ng;
  const Tensor& buf = b.comm_buf.defined() ? b.comm_buf : b.flat;
  if (b.comm_buf.defined()) b.comm_buf.copy_(b.flat);
  b.t_launch = std::chrono::steady_clock::now();
  b.timed = false;
  b.work = group_->all_reduce(buf, comm::ReduceOp::sum);
  b.launched = true;
  ++stats_.buckets_launched;
  stats_.bytes += static_cast<int64_t>(buf.nbytes());
}

void GradReducer::poll_in_flight() {
  for (auto& b : buckets_)
    if (b.work && !b.timed && b.work->is_completed()) note_done(b);
}

void GradReducer::note_done(Bucket& b) {
  stats_.comm_ms += ms_since(b.t_launch);
  b.timed = true;
  if (trace::enabled())
    trace::record("allreduce bucket " + std::to_string(&b - buckets_.data()), "comm",
                  trace::now_us() - static_cast<int64_t>(ms_since(b.t_launch) * 1000), trace::now_us());
}

void GradReducer::complete(Bucket& b) {
  if (!b.work) return;
  b.work->wait();
  if (!b.timed) note_done(b);
  if (b.comm_buf.defined()) {
    NoGradGuard ng;
    b.flat.copy_(b.comm_buf);
  }
  b.work.reset();
}

void GradReducer::finalize() {
  auto t0 = std::chrono::steady_clock::now();
  // Buckets not launched yet (parameters backward did not reach, or sync was off): in order.
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& b = buckets_[next_launch_];
    b.pending = 0;
    launch(b);
  }
  for (auto& b : buckets_) complete(b);
  stats_.exposed_ms += ms_since(t0);
}

}  // namespace st::runtime
