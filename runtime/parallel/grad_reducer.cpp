#include "runtime/parallel/grad_reducer.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "runtime/observe/trace.h"
#include "tensor/autograd.h"
#include "tensor/error.h"
#include "tensor/memory_category.h"

namespace st::runtime {

GradReducer::GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<comm::Communicator> group,
                         ReducerOptions options)
    : params_(std::move(params)), group_(std::move(group)), options_(std::move(options)),
      alive_(std::make_shared<bool>(true)) {
  if (!group_) ST_THROW(ValueError, "GradReducer: no communicator");
  const size_t n = params_.size();
  if (!options_.segment.empty() && options_.segment.size() != n)
    ST_THROW(ValueError, "GradReducer: " << options_.segment.size() << " segments for " << n << " parameters");
  if (options_.comm_buffers < 1) ST_THROW(ValueError, "GradReducer: comm_buffers must be ≥ 1");
  if (options_.reduce_to_segment) {
    ST_CHECK(options_.segment.size() == n, ValueError, "GradReducer: reduce_to_segment needs a segment per parameter");
    for (int r : options_.segment)
      ST_CHECK(r >= 0 && r < group_->size(), ValueError,
               "GradReducer: segment " << r << " is not a rank of group '" << group_->name() << "' (reduce_to_segment)");
  }
  ST_CHECK(!options_.shard_gradients || options_.reduce_to_segment, ValueError,
           "GradReducer: shard_gradients needs reduce_to_segment (an owner per bucket)");
  poll_progress_ = !group_->progresses_on_its_own();
  skip_comm_ = options_.skip_collectives;
  ready_.assign(n, false);
  held_.assign(n, false);
  for (auto& [name, p] : params_) shapes_.push_back(p.shape());
  for (const std::string& name : options_.launch_in_finalize) {
    auto it = std::find_if(params_.begin(), params_.end(), [&](const auto& np) { return np.first == name; });
    ST_CHECK(it != params_.end(), ValueError, "GradReducer: launch_in_finalize names '" << name << "', not a parameter");
    held_[static_cast<size_t>(it - params_.begin())] = true;
  }
  std::weak_ptr<bool> alive = alive_;
  for (size_t k = 0; k < n; ++k) {
    params_[k].second.add_grad_ready_hook([this, k, alive](const Tensor&) {
      if (alive.lock()) on_grad_ready(k);
    });
  }
}

GradReducer::~GradReducer() {
  alive_.reset();
  for (auto& [name, p] : params_) p.clear_grad_ready_hooks();
  // Works still in flight (an exception mid-step) wait for themselves in their destructors.
}

bool GradReducer::layout_is_current() const {
  if (buckets_.empty()) return params_.empty();
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].second;
    const Bucket& b = buckets_[bucket_of_[k]];
    if (p.dtype() != b.dtype || p.device() != b.device) return false;
  }
  return true;
}

void GradReducer::lay_out() {
  if (layout_is_current()) return;
  wait_all();
  const size_t n = params_.size();
  buckets_.clear();
  staging_.clear();
  staging_free_.clear();
  bucket_of_.assign(n, 0);
  offsets_.assign(n, 0);
  auto segment = [&](size_t k) { return options_.segment.empty() ? 0 : options_.segment[k]; };
  // Reverse registration order; a bucket holds one dtype, device and segment, and either only
  // parameters held for finalize() or none.
  std::vector<std::vector<size_t>> groups;
  size_t bytes = 0, cap = options_.first_bucket_bytes;
  for (size_t k = n; k-- > 0;) {
    const Tensor& p = params_[k].second;
    const size_t head = groups.empty() ? 0 : groups.back().front();
    bool fits = !groups.empty() && bytes + p.nbytes() <= cap && params_[head].second.dtype() == p.dtype() &&
                params_[head].second.device() == p.device() && segment(head) == segment(k) &&
                held_[head] == held_[k];
    if (!fits) {
      if (!groups.empty()) cap = options_.bucket_bytes;
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += p.nbytes();
  }
  int64_t largest = 0;
  bool cast = false;
  for (auto& g : groups) {
    Bucket b;
    int64_t numel = 0;
    for (size_t k : g) {
      bucket_of_[k] = buckets_.size();
      offsets_[k] = numel;
      numel += params_[k].second.numel();
    }
    const Tensor& p0 = params_[g.front()].second;
    b.params = g;
    b.numel = numel;
    b.dtype = p0.dtype();
    b.device = p0.device();
    buckets_.push_back(std::move(b));
    if (!released(buckets_.size() - 1))
      buckets_.back().flat = Tensor::zeros({numel}, p0.dtype(), p0.device());  // (numel,)
    cast = cast || options_.comm_dtype != p0.dtype();
    largest = std::max(largest, numel);
  }
  if (cast) {  // every bucket on one device here (the model's); buffers of the largest bucket
    const int count = std::min<int>(options_.comm_buffers, static_cast<int>(buckets_.size()));
    for (int s = 0; s < count; ++s)
      staging_.push_back(Tensor::empty({largest}, options_.comm_dtype, buckets_.front().device));  // (largest,)
    staging_free_.assign(staging_.size(), true);
  }
}

int64_t GradReducer::num_buckets() {
  lay_out();
  return static_cast<int64_t>(buckets_.size());
}

std::vector<std::string> GradReducer::bucket_names(int64_t i) {
  std::vector<std::string> names;
  for (size_t k : bucket_params(i)) names.push_back(params_[k].first);
  return names;
}

const Tensor& GradReducer::bucket_buffer(int64_t i) {
  lay_out();
  return buckets_.at(static_cast<size_t>(i)).flat;
}

int64_t GradReducer::bucket_numel(int64_t i) {
  lay_out();
  return buckets_.at(static_cast<size_t>(i)).numel;
}

const std::vector<size_t>& GradReducer::bucket_params(int64_t i) {
  lay_out();
  return buckets_.at(static_cast<size_t>(i)).params;
}

void GradReducer::zero_grad() {
  lay_out();
  wait_all();
  NoGradGuard ng;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.launched = false;
    b.pending = static_cast<int>(b.params.size());
    if (released(i)) {  // no buffer until launch: backward's own gradients until then
      b.flat = Tensor();
      for (size_t k : b.params) {
        params_[k].second.zero_grad(/*set_to_none=*/true);
        ready_[k] = false;
      }
      continue;
    }
    b.flat.fill_(0.0);
    for (size_t k : b.params) {
      Tensor view = b.flat.narrow(0, offsets_[k], params_[k].second.numel()).view(shapes_[k]);
      params_[k].second.set_grad(view);
      ready_[k] = false;
    }
  }
  hooks_seen_ = 0;
  launches_.clear();
}

void GradReducer::set_sync(bool on) { sync_ = on; }

void GradReducer::on_grad_ready(size_t k) {
  if (!sync_ || ready_[k] || buckets_.empty()) return;
  ready_[k] = true;
  ++hooks_seen_;
  const size_t i = bucket_of_[k];
  if (--buckets_[i].pending == 0 && !held_[k]) launch(i, /*from_finalize=*/false);
  if (poll_progress_) poll_in_flight();
}

int GradReducer::root_of(size_t i) const { return options_.segment[buckets_[i].params.front()]; }

bool GradReducer::holds_sum(size_t i) const { return !options_.reduce_to_segment || root_of(i) == group_->rank(); }

bool GradReducer::released(size_t i) const { return options_.shard_gradients && !holds_sum(i); }

void GradReducer::gather_in(size_t i) {
  // bound the buffers of other owners' buckets in flight: the oldest of them completes first
  for (;;) {
    size_t count = 0, oldest = buckets_.size();
    for (size_t j : in_flight_)
      if (released(j)) {
        if (count++ == 0) oldest = j;
      }
    if (count < kShardWindow) break;
    if (buckets_[oldest].work) buckets_[oldest].work->wait_on_stream();
    retire(oldest);
  }
  Bucket& b = buckets_[i];
  NoGradGuard ng;
  MemoryCategoryScope mem(MemoryCategory::grads);
  b.flat = Tensor::empty({b.numel}, b.dtype, b.device);  // (numel,)
  for (size_t k : b.params) {
    Tensor& p = params_[k].second;
    Tensor view = b.flat.narrow(0, offsets_[k], p.numel());
    const Tensor g = p.grad();
    if (g.defined())
      view.copy_(g.reshape({p.numel()}));
    else
      view.fill_(0.0);  // backward did not reach it: a zero gradient
    p.zero_grad(/*set_to_none=*/true);  // the engine's tensor is freed here
  }
}

int GradReducer::take_staging() {
  for (;;) {
    for (size_t s = 0; s < staging_free_.size(); ++s)
      if (staging_free_[s]) {
        staging_free_[s] = false;
        return static_cast<int>(s);
      }
    // all taken: the oldest bucket in flight gives its buffer back
    ST_CHECK(!in_flight_.empty(), ValueError, "GradReducer: no communication buffer and nothing in flight");
    const size_t oldest = in_flight_.front();
    if (buckets_[oldest].work) buckets_[oldest].work->wait_on_stream();  // its cast back queues behind it
    retire(oldest);
  }
}

void GradReducer::launch(size_t i, bool from_finalize) {
  Bucket& b = buckets_[i];
  b.launched = true;
  b.t_launch = Clock::now();
  launches_.push_back({static_cast<int64_t>(i), hooks_seen_, from_finalize, b.t_launch});
  ++stats_.buckets_launched;
  if (group_->size() == 1) return;  // nothing to reduce
  if (released(i)) gather_in(i);
  NoGradGuard ng;
  Tensor buf = b.flat;
  if (b.flat.dtype() != options_.comm_dtype) {
    b.staging = take_staging();
    buf = staging_[static_cast<size_t>(b.staging)].narrow(0, 0, b.numel);
    buf.copy_(b.flat);  // (numel,) in comm dtype
    if (released(i)) b.flat = Tensor();  // the staged copy is what goes out
  }
  b.t_launch_us = trace::now_us();
  if (!skip_comm_) {
    // The bucket index as comm's caller tag: debug mode compares it across the ranks.
    const comm::CallerTag tag{static_cast<int64_t>(i)};
    if (options_.reduce_to_segment) {
      b.work = group_->reduce(buf, buf, root_of(i), comm::ReduceOp::sum, tag);  // the sum on the owner only
      ++stats_.reduces;
    } else {
      b.work = group_->all_reduce(buf, comm::ReduceOp::sum, tag);
    }
    stats_.bytes += static_cast<int64_t>(buf.nbytes());
  }
  in_flight_.push_back(i);
}

void GradReducer::poll_in_flight() {
  for (size_t n = in_flight_.size(); n-- > 0;) {
    const size_t i = in_flight_.front();
    const bool done = !buckets_[i].work || buckets_[i].work->is_completed();
    in_flight_.pop_front();
    in_flight_.push_back(i);  // rotate: every bucket polled once, launch order kept
    if (done) retire(i);
  }
}

void GradReducer::retire(size_t i) {
  Bucket& b = buckets_[i];
  if (b.staging >= 0) {
    NoGradGuard ng;
    if (holds_sum(i)) b.flat.copy_(staging_[static_cast<size_t>(b.staging)].narrow(0, 0, b.numel));
    staging_free_[static_cast<size_t>(b.staging)] = true;
    b.staging = -1;
  }
  if (trace::enabled())  // launch → the completion seen by this rank, or its stream wait enqueued
    trace::record((options_.reduce_to_segment ? "reduce bucket " : "allreduce bucket ") + std::to_string(i), "comm",
                  b.t_launch_us, trace::now_us());
  if (b.work && !b.work->is_completed()) unsettled_.push_back(std::move(b.work));
  b.work.reset();
  if (released(i)) b.flat = Tensor();  // another rank's sum: this rank's copy is no longer needed
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), i));
}

void GradReducer::stream_wait_all() {
  while (!in_flight_.empty()) {
    const size_t i = in_flight_.front();
    if (buckets_[i].work) buckets_[i].work->wait_on_stream();
    retire(i);
  }
}

void GradReducer::wait_all() {
  while (!in_flight_.empty()) {
    const size_t i = in_flight_.front();
    if (buckets_[i].work) buckets_[i].work->wait();
    retire(i);
  }
  for (const comm::WorkPtr& w : unsettled_) w->wait();
  unsettled_.clear();
}

void GradReducer::finalize() {
  const Clock::time_point t0 = Clock::now();
  const int64_t t0_us = trace::now_us();
  // Buckets not launched yet (parameters backward did not reach, or sync was off): in order.
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (!buckets_[i].launched) {
      buckets_[i].pending = 0;
      launch(i, /*from_finalize=*/true);
    }
  stream_wait_all();
  for (const BucketLaunch& l : launches_)
    if (!l.from_finalize && l.hooks_seen < hooks_seen_) ++stats_.launched_early;
  ++stats_.steps;
  stats_.wait_ms += ms_since(t0);
  if (trace::enabled()) trace::record("gradient sync wait", "comm", t0_us, trace::now_us());
}

}  // namespace st::runtime
