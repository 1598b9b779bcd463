// Optimizers: master weights, state and the update calls into ops/optim.h (AdamW: one
// multi-tensor call for all parameters; SGD: one call per parameter).
#include "runtime/optim/optimizer.h"

#include <set>

#include "ops/optim.h"
#include "ops/step_state.h"
#include "runtime/nn/module.h"
#include "tensor/autograd.h"

namespace st::runtime {

Optimizer::Optimizer(NamedTensors params, DType compute) : params_(std::move(params)), compute_(compute) {
  ST_CHECK(is_floating(compute), DTypeError, "optimizer: compute dtype " << dtype_name(compute));
  NoGradGuard ng;
  std::set<std::string> names;
  for (auto& [name, p] : params_) {
    ST_CHECK(names.insert(name).second, ValueError, "optimizer: parameter '" << name << "' given twice");
    ST_CHECK(p.is_contiguous(), ValueError, "optimizer: parameter '" << name << "' is not contiguous");
    if (compute == DType::f32 && p.dtype() == DType::f32) {
      master_.push_back(p.detach());  // the model's own tensor
    } else {
      master_.push_back(p.detach().to(DType::f32).clone());     // f32 copy of the current value
      if (p.dtype() != compute) replace_tensor_data(p, master_.back().to(compute));
    }
  }
}

Tensor Optimizer::lp_target(size_t i) const {
  const Tensor& p = params_[i].second;
  return p.dtype() == DType::f32 ? Tensor() : p.detach();
}

void Optimizer::step(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) {
  ST_CHECK(grads.size() == params_.size(), ValueError,
           "optimizer: " << grads.size() << " gradients for " << params_.size() << " parameters");
  for (size_t i = 0; i < grads.size(); ++i) {
    ST_CHECK(grads[i].defined(), ValueError, "optimizer: no gradient for '" << params_[i].first << "'");
    ST_CHECK(grads[i].shape() == params_[i].second.shape(), ShapeError,
             "optimizer: gradient " << shape_str(grads[i].shape()) << " for '" << params_[i].first << "' "
                                    << shape_str(params_[i].second.shape()));
  }
  NoGradGuard ng;
  ++step_;
  update(grads, lr, gs);
}

void Optimizer::step_on_device(const std::vector<Tensor>& grads, const Tensor& state) {
  ST_CHECK(grads.size() == params_.size(), ValueError,
           "optimizer: " << grads.size() << " gradients for " << params_.size() << " parameters");
  NoGradGuard ng;
  update_on_device(grads, state);
}

void Optimizer::update_on_device(const std::vector<Tensor>& grads, const Tensor& state) {
  const ops::DeviceStepState s = ops::step_state_download(state);  // waits for the step's kernels
  if (s.skip) return;
  step_ = s.opt_step;  // t of this update (the state counted it)
  update(grads, s.lr, ops::GradScale{s.gs.unscale, s.gs.clip});
}

NamedTensors Optimizer::master_weights() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].first, master_[i]);
  return out;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("step", Tensor::from_vector(std::vector<int64_t>{step_}, {1}));
  auto slots = const_cast<Optimizer*>(this)->state_slots();
  for (auto& [key, ts] : slots)
    for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(key + "." + params_[i].first, (*ts)[i]);
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.dtype() != DType::f32) out.emplace_back("master." + params_[i].first, master_[i]);
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  NamedTensors mine = state_dict();
  std::set<std::string> known;
  for (auto& [key, t] : mine) {
    known.insert(key);
    auto it = sd.find(key);
    ST_CHECK(it != sd.end(), ValueError, "optimizer state: missing key '" << key << "'");
    ST_CHECK(it->second.shape() == t.shape(), ValueError,
             "optimizer state: '" << key << "' has shape " << shape_str(it->second.shape()) << ", expected "
                                  << shape_str(t.shape()));
  }
  for (auto& [key, t] : sd) ST_CHECK(known.count(key), ValueError, "optimizer state: unexpected key '" << key << "'");
  ST_CHECK(sd.at("step").dtype() == DType::i64, ValueError, "optimizer state: 'step' must be i64");
  load_state([&](const std::string& key, const Tensor& dst) { Tensor(dst).copy_(sd.at(key)); });
}

void Optimizer::load_state(const std::function<void(const std::string& key, const Tensor& dst)>& fill) {
  NoGradGuard ng;
  for (auto& [key, t] : state_dict()) {
    if (key == "step") {
      Tensor step = Tensor::zeros({1}, DType::i64);
      fill(key, step);
      step_ = step.data<int64_t>()[0];
    } else {
      fill(key, t);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.dtype() != DType::f32) params_[i].second.detach().copy_(master_[i]);
}

Tensor Optimizer::snapshot_copy(const Tensor& t) const {
  if (!t.defined() || t.numel() == 0) return Tensor();
  const auto it = copies_.find(t.data_ptr());
  if (it == copies_.end()) return Tensor();
  const auto& [src, copy] = it->second;
  if (src.numel() != t.numel() || src.dtype() != t.dtype() || src.device() != t.device() || !t.is_contiguous())
    return Tensor();
  return copy.view(t.shape());
}

// ---- AdamW ------------------------------------------------------------------------------------

AdamW::AdamW(NamedTensors params, const AdamWOptions& opt, DType compute)
    : Optimizer(std::move(params), compute), opt_(opt) {
  for (auto& m : master_) {
    m_.push_back(Tensor::zeros(m.shape(), DType::f32, m.device()));
    v_.push_back(Tensor::zeros(m.shape(), DType::f32, m.device()));
  }
}

void AdamW::update(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) {
  // the scalars of this step with and without weight decay (decays(i): ≥ 2 dims)
  ops::AdamWParams p{static_cast<float>(lr), static_cast<float>(opt_.beta1), static_cast<float>(opt_.beta2),
                     static_cast<float>(opt_.eps), static_cast<float>(opt_.weight_decay)};
  const ops::AdamWScalars with_wd = ops::adamw_scalars(p, step_);
  p.weight_decay = 0.f;
  const ops::AdamWScalars no_wd = ops::adamw_scalars(p, step_);
  std::vector<ops::AdamWSlot> slots;
  slots.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    slots.push_back({&master_[i], &grads[i], &m_[i], &v_[i], lp_target(i), decays(i) ? with_wd : no_wd});
  ops::adamw_step_multi(slots, gs);
}

void AdamW::update_on_device(const std::vector<Tensor>& grads, const Tensor& state) {
  std::vector<ops::AdamWSlot> slots;
  std::vector<bool> decay;
  slots.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    slots.push_back({&master_[i], &grads[i], &m_[i], &v_[i], lp_target(i), {},
                     slot_snapshot_.empty() ? Tensor() : slot_snapshot_[i]});
    decay.push_back(decays(i));
  }
  ops::adamw_step_multi_state(slots, decay, state);
}

bool AdamW::keep_snapshot() {
  if (snapshot_.defined() || master_.empty()) return true;
  constexpr int64_t kAlignFloats = 64;  // 256 bytes
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Tensor& m : master_) {
    offsets.push_back(total);
    total += (ops::adamw_snapshot_floats(m.numel()) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }
  snapshot_ = Tensor::empty({total}, DType::f32, master_.front().device());
  for (size_t i = 0; i < master_.size(); ++i) {
    const int64_t n = master_[i].numel(), stride = ops::adamw_snapshot_stride(n);
    slot_snapshot_.push_back(snapshot_.narrow(0, offsets[i], ops::adamw_snapshot_floats(n)));
    const Tensor* parts[] = {&master_[i], &m_[i], &v_[i]};
    if (n > 0)
      for (int k = 0; k < 3; ++k)
        copies_.emplace(parts[k]->data_ptr(), std::pair{*parts[k], snapshot_.narrow(0, offsets[i] + k * stride, n)});
  }
  return true;
}

std::vector<std::pair<std::string, std::vector<Tensor>*>> AdamW::state_slots() {
  return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
}

// ---- SGD --------------------------------------------------------------------------------------

Sgd::Sgd(NamedTensors params, const SgdOptions& opt, DType compute)
    : Optimizer(std::move(params), compute), opt_(opt) {
  for (auto& m : master_) buf_.push_back(Tensor::zeros(m.shape(), DType::f32, m.device()));
}

void Sgd::update(const std::vector<Tensor>& grads, double lr, const ops::GradScale& gs) {
  for (size_t i = 0; i < grads.size(); ++i) {
    float wd = decays(i) ? static_cast<float>(opt_.weight_decay) : 0.f;
    ops::sgd_step(master_[i], grads[i], buf_[i], static_cast<float>(lr), static_cast<float>(opt_.momentum), wd,
                  step_ == 1, gs);
    Tensor lp = lp_target(i);
    if (lp.defined()) lp.copy_(master_[i]);
  }
}

std::vector<std::pair<std::string, std::vector<Tensor>*>> Sgd::state_slots() { return {{"momentum_buffer", &buf_}}; }

}  // namespace st::runtime
