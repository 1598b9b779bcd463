// ZeRO-3: units cut from the layers, pieces for the optimizer, gathers around each layer and
// per-unit reduce-scatters from the grad-ready hooks (design in runtime/parallel/zero3.h).
#include "runtime/parallel/zero3.h"

#include <algorithm>

#include "tensor/autograd.h"
#include "tensor/error.h"
#include "tensor/memory_category.h"

namespace st::runtime {

Zero3::Zero3(const LanguageModel& model, std::shared_ptr<comm::Communicator> dp, std::set<std::string> own_units,
             DType comm_dtype, bool prefetch)
    : dp_(std::move(dp)), comm_dtype_(comm_dtype), prefetch_(prefetch) {
  ST_CHECK(dp_ != nullptr, ValueError, "Zero3: no communicator");
  rank_ = dp_->rank();
  size_ = dp_->size();
  std::unordered_map<const TensorImpl*, size_t> by_impl;
  for (const auto& [name, p] : model.named_parameters()) {
    ST_CHECK(p.dtype() == DType::f32, DTypeError, "Zero3: parameter '" << name << "' is " << p.describe() << " (build in f32)");
    ST_CHECK(p.is_contiguous(), ValueError, "Zero3: parameter '" << name << "' is not contiguous");
    Param q;
    q.name = name;
    q.p = p;
    q.shape = p.shape();
    q.numel = p.numel();
    q.unit = -1;
    by_impl.emplace(p.impl_ptr(), params_.size());
    ST_CHECK(index_.emplace(name, params_.size()).second, ValueError, "Zero3: parameter '" << name << "' appears twice");
    params_.push_back(std::move(q));
  }
  // units in the order the layers first use their parameters; own-unit parameters first in their layer
  auto new_unit = [&](const std::vector<size_t>& ks) {
    Unit u;
    for (size_t k : ks) {
      params_[k].unit = static_cast<int>(units_.size());
      params_[k].offset = u.numel;
      u.numel += params_[k].numel;
      if (params_[k].p.requires_grad()) ++u.expected;
    }
    u.params = ks;
    u.shard = (u.numel + size_ - 1) / size_;
    u.padded = u.shard * size_;
    units_.push_back(std::move(u));
  };
  for (const auto& layer : model.layers()) {
    std::vector<size_t> mine;
    std::set<int> needs;
    for (const Tensor& p : layer->parameters()) {
      auto it = by_impl.find(p.impl_ptr());
      ST_CHECK(it != by_impl.end(), ValueError, "Zero3: a parameter of layer '" << layer->scope() << "' is not the model's");
      Param& q = params_[it->second];
      if (q.unit < 0 && own_units.count(q.name)) new_unit({it->second});
      if (q.unit < 0 && std::find(mine.begin(), mine.end(), it->second) == mine.end()) mine.push_back(it->second);
      if (q.unit >= 0) needs.insert(q.unit);
    }
    std::sort(mine.begin(), mine.end());  // registration order inside the unit
    if (!mine.empty()) {
      needs.insert(static_cast<int>(units_.size()));
      new_unit(mine);
    }
    layer_units_.emplace_back(needs.begin(), needs.end());
    layer_scope_.push_back(layer->scope());
  }
  for (const Param& q : params_)
    ST_CHECK(q.unit >= 0, ValueError, "Zero3: parameter '" << q.name << "' belongs to no layer");
}

void Zero3::bind(size_t k, const Tensor& flat) {
  Param& q = params_[k];
  TensorImpl* impl = q.p.impl_ptr();
  impl->storage = flat.storage();
  impl->offset = q.offset;
  impl->strides = contiguous_strides(q.shape);
  impl->dtype = flat.dtype();
  impl->grad.reset();
}

NamedTensors Zero3::shard(const PieceFill& fill, Device device) {
  NoGradGuard ng;
  MemoryCategoryScope mem(MemoryCategory::params);
  NamedTensors pieces;
  for (int u = 0; u < num_units(); ++u) {
    Unit& un = units_[static_cast<size_t>(u)];
    un.values = Tensor::zeros({un.shard}, DType::f32, device);  // (S,), padding zero
    const int64_t first = rank_ * un.shard;
    for (size_t k : un.params) {
      Param& q = params_[k];
      const int64_t lo = std::max(q.offset, first), hi = std::min(q.offset + q.numel, first + un.shard);
      q.lo = lo - q.offset;
      q.len = std::max<int64_t>(0, hi - lo);
      if (q.len == 0) continue;
      Tensor slot = un.values.narrow(0, lo - first, q.len);  // (len,)
      fill(q.name, slot, q.lo);
      q.piece = q.shape.size() >= 2 ? slot.view({1, q.len}) : slot;
      pieces.emplace_back(q.name, q.piece);
    }
    {
      Storage::DeferAllocation defer;  // released from the start: no unit is ever whole outside a gather
      un.flat = Tensor::empty({un.padded}, DType::f32, device);
    }
    for (size_t k : un.params) bind(k, un.flat);  // a tensor's old storage (if any) goes with its last view
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    const int u = params_[k].unit;
    params_[k].p.add_grad_ready_hook([this, u](const Tensor&) { on_ready(u); });
  }
  return pieces;
}

void Zero3::adopt(DType compute) {
  if (compute == DType::f32) return;  // the pieces are the shards' views, the masters the pieces
  NoGradGuard ng;
  MemoryCategoryScope mem(MemoryCategory::params);
  for (Unit& un : units_) {
    Tensor values = Tensor::zeros({un.shard}, compute, un.values.device());
    for (size_t k : un.params) {
      Param& q = params_[k];
      if (q.len == 0) continue;
      const int64_t pos = piece_pos(q);
      values.narrow(0, pos, q.len).copy_(q.piece.flatten());  // the optimizer's rounded master
      TensorImpl* impl = q.piece.impl_ptr();  // the optimizer holds this tensor: re-pointed in place
      impl->storage = values.storage();
      impl->offset = pos;
      impl->strides = contiguous_strides(q.piece.shape());
      impl->dtype = compute;
    }
    un.values = values;
    un.grad = Tensor();
    {
      Storage::DeferAllocation defer;
      un.flat = Tensor::empty({un.padded}, compute, values.device());
    }
    for (size_t k : un.params) bind(k, un.flat);
  }
}

NamedTensors Zero3::gather_full(const NamedTensors& pieces) {
  NoGradGuard ng;
  std::unordered_map<std::string, Tensor> by_name(pieces.begin(), pieces.end());
  NamedTensors out;
  for (const Unit& un : units_) {
    const Device dev = un.values.device();
    Tensor send = Tensor::zeros({un.shard}, DType::f32, dev), recv = Tensor::empty({un.padded}, DType::f32, dev);
    for (size_t k : un.params) {
      const Param& q = params_[k];
      auto it = by_name.find(q.name);
      if (q.len > 0 && it != by_name.end()) send.narrow(0, piece_pos(q), q.len).copy_(it->second.flatten());
    }
    dp_->all_gather(send, recv)->wait();
    for (size_t k : un.params) {
      const Param& q = params_[k];
      if (q.offset / un.shard == rank_) out.emplace_back(q.name, recv.narrow(0, q.offset, q.numel).clone().view(q.shape));
    }
  }
  return out;
}

Zero3::PieceRange Zero3::piece_range(const std::string& name) const {
  auto it = index_.find(name);
  ST_CHECK(it != index_.end(), ValueError, "Zero3: unknown parameter '" << name << "'");
  return {params_[it->second].lo, params_[it->second].len};
}

const Shape& Zero3::local_shape(const std::string& name) const {
  auto it = index_.find(name);
  ST_CHECK(it != index_.end(), ValueError, "Zero3: unknown parameter '" << name << "'");
  return params_[it->second].shape;
}

bool Zero3::has_piece(const std::string& name) const {
  auto it = index_.find(name);
  return it != index_.end() && params_[it->second].len > 0;
}

void Zero3::begin_step() {
  NoGradGuard ng;
  MemoryCategoryScope mem(MemoryCategory::grads);
  for (Unit& un : units_) {
    if (!un.grad.defined()) un.grad = Tensor::zeros({un.shard}, un.values.dtype(), un.values.device());
    else un.grad.fill_(0.0);
    for (size_t k : un.params) {
      Param& q = params_[k];
      if (q.len > 0) q.piece.set_grad(un.grad.narrow(0, piece_pos(q), q.len).view(q.piece.shape()));
    }
  }
}

Tensor Zero3::unit_grad(const std::string& name) const {
  const Param& q = params_.at(index_.at(name));
  const Unit& un = units_[static_cast<size_t>(q.unit)];
  ST_CHECK(un.params.size() == 1, ValueError, "Zero3: '" << name << "' is not a unit of its own");
  return un.grad;
}

void Zero3::launch(int u) {
  Unit& un = units_[static_cast<size_t>(u)];
  if (un.gathered) return;
  un.flat.storage()->reallocate();
  un.gather = dp_->all_gather(un.values, un.flat);
  un.gathered = true;
  ++stats_.gathers;
  stats_.bytes_gathered += static_cast<int64_t>(un.flat.nbytes());
  int64_t now = 0;
  for (const Unit& v : units_) now += v.gathered ? 1 : 0;
  stats_.max_gathered = std::max(stats_.max_gathered, now);
}

void Zero3::wait_gathered(int u) {
  Unit& un = units_[static_cast<size_t>(u)];
  if (un.gather) un.gather->wait_on_stream();  // compute queues behind it (a host wait on MPI)
}

void Zero3::release(int u) {
  Unit& un = units_[static_cast<size_t>(u)];
  if (!un.gathered) return;
  if (un.gather) {
    un.gather->wait();
    un.gather.reset();
  }
  un.flat.storage()->release();
  un.gathered = false;
}

void Zero3::launch_layer(size_t i) {
  for (int u : layer_units_[i]) launch(u);
}

void Zero3::ensure_layer(size_t i) {
  launch_layer(i);
  for (int u : layer_units_[i]) wait_gathered(u);
}

Tensor Zero3::forward(size_t i, size_t begin, size_t end, const Tensor& x,
                      const std::function<Tensor(const Tensor&)>& run) {
  ensure_layer(i);
  if (prefetch_ && i + 1 < end) launch_layer(i + 1);
  Tensor y = run(x);
  for (int u : layer_units_[i]) {
    const bool next_needs = i + 1 < end && std::count(layer_units_[i + 1].begin(), layer_units_[i + 1].end(), u) > 0;
    if (!next_needs) release(u);
  }
  if (!grad_enabled() || !y.requires_grad()) return y;
  Tensor z = y.detach();
  attach_grad_fn(z, "zero3 gather(" + layer_scope_[i] + ")", {y}, [this, i, begin](const Tensor& g) {
    ensure_layer(i);
    if (prefetch_ && i > begin) launch_layer(i - 1);
    return std::vector<Tensor>{g};
  });
  return z;
}

void Zero3::on_ready(int u) {
  Unit& un = units_[static_cast<size_t>(u)];
  if (++un.ready >= un.expected) reduce(u);
}

void Zero3::reduce(int u) {
  NoGradGuard ng;
  MemoryCategoryScope mem(MemoryCategory::grads);
  Unit& un = units_[static_cast<size_t>(u)];
  un.ready = 0;
  // the previous unit's reduce-scatter ran during this unit's backward; done before this one's
  // buffers exist, so one unit's full gradients and one comm buffer are the most held at once
  while (!pending_.empty()) complete_front();
  const Device dev = un.values.device();
  Pending pr;
  pr.unit = u;
  pr.in = Tensor::empty({un.padded}, comm_dtype_, dev);  // (padded,): the unit's gradients, comm dtype
  if (un.padded > un.numel) pr.in.narrow(0, un.numel, un.padded - un.numel).fill_(0.0);
  for (size_t k : un.params) {
    Param& q = params_[k];
    Tensor slot = pr.in.narrow(0, q.offset, q.numel);
    const Tensor g = q.p.grad();
    if (g.defined()) slot.view(q.shape).copy_(g);
    else slot.fill_(0.0);
    q.p.zero_grad(/*set_to_none=*/true);
  }
  release(u);  // its backward is over
  pr.out = Tensor::empty({un.shard}, comm_dtype_, dev);
  pr.work = dp_->reduce_scatter(pr.in, pr.out);
  ++stats_.reduce_scatters;
  pending_.push_back(std::move(pr));
}

void Zero3::complete_front() {
  NoGradGuard ng;
  Pending pr = std::move(pending_.front());
  pending_.pop_front();
  pr.work->wait();
  Unit& un = units_[static_cast<size_t>(pr.unit)];
  un.grad.add_(pr.out.dtype() == un.grad.dtype() ? pr.out : pr.out.to(un.grad.dtype()));
}

void Zero3::finish() {
  // a unit whose hooks did not all fire (a parameter without a gradient this step): reduced now
  for (int u = 0; u < num_units(); ++u) {
    Unit& un = units_[static_cast<size_t>(u)];
    bool any = un.ready > 0;
    for (size_t k : un.params) any = any || params_[k].p.grad().defined();
    if (any) reduce(u);
  }
  while (!pending_.empty()) complete_front();
  for (int u = 0; u < num_units(); ++u) release(u);  // prefetched, never used
}

int64_t Zero3::shard_numel() const {
  int64_t n = 0;
  for (const Unit& un : units_) n += un.shard;
  return n;
}

int64_t Zero3::largest_unit_padded() const {
  int64_t n = 0;
  for (const Unit& un : units_) n = std::max(n, un.padded);
  return n;
}

}  // namespace st::runtime
