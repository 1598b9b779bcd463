// LanguageModel: the layer list and what is derived from it.
#include "runtime/nn/language_model.h"

#include <map>

#include "runtime/nn/lm_loss.h"
#include "runtime/nn/recompute.h"
#include "tensor/autograd.h"

namespace st::runtime {

void LanguageModel::init_weights(uint64_t seed) {
  NoGradGuard ng;
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p.detach();
    init_parameter(name, t, seed, 0);
  }
}

void LanguageModel::init_parameter(const std::string& name, Tensor&, uint64_t, int64_t) const {
  ST_THROW(ValueError, "the " << family() << " model cannot draw a part of '" << name << "' alone");
}

Tensor LanguageModel::forward(const Tensor& tokens) {
  ST_CHECK(!layers_.empty(), ValueError, "LanguageModel::forward: the model has no layers");
  ST_CHECK(ranges_.size() == 1, ValueError,
           "LanguageModel::forward: the model holds " << ranges_.size() << " ranges of layers (run them one by one)");
  return forward_layers(tokens, 0, layers_.size());
}

Tensor LanguageModel::forward_layers(const Tensor& x_in, size_t begin, size_t end) {
  Tensor x = x_in;
  for (size_t i = begin; i < end; ++i) {
    // named by --max-memory's error (tensor/memory_category.h); a layer at the model's root (Llama's
    // head: model.norm, lm_head) has no scope of its own and goes by its index
    std::string name = "layer ";
    if (layers_[i]->scope().empty())
      name.append(1, '#').append(std::to_string(i));
    else
      name.append(layers_[i]->scope());
    name.append(" forward");
    MemoryLayerScope layer(std::move(name));
    auto run = [&](const Tensor& in) {
      return recompute_ && recomputable(i) ? forward_recomputed(*layers_[i], in, gen_.get()) : layers_[i]->forward(in);
    };
    x = hook_ ? hook_->forward(i, begin, end, x, run) : run(x);
  }
  return x;
}

double LayerInfo::param_bytes() const {
  double b = 0;
  for (auto& [n, shape] : params) b += 4.0 * static_cast<double>(shape_numel(shape));
  return b;
}

bool LanguageModel::recomputable(size_t i) const {
  const int g = global_layer(i);
  return g != 0 && g + 1 != total_layers_;
}

std::vector<int> LanguageModel::set_layer_ranges(std::vector<LayerRange> ranges, int total) {
  ST_CHECK(layers_.empty(), ValueError, "set_layer_ranges: layers were added already");
  if (ranges.empty()) ranges.push_back({});
  int prev_end = 0;
  global_.clear();
  for (LayerRange& r : ranges) {
    if (r.end < 0) r.end = total;
    ST_CHECK(prev_end <= r.begin && r.begin < r.end && r.end <= total, ValueError,
             family() << ": layers [" << r.begin << ", " << r.end << ") of a " << total
                      << "-layer model (ranges must be non-empty, disjoint, in order)");
    prev_end = r.end;
    for (int i = r.begin; i < r.end; ++i) global_.push_back(i);
  }
  ranges_ = ranges;
  total_layers_ = total;
  range_set_ = true;
  return global_;
}

void LanguageModel::add_layer(const std::string& scope, std::shared_ptr<Layer> layer) {
  if (!range_set_) {  // a model that holds all its layers
    global_.push_back(static_cast<int>(layers_.size()));
    total_layers_ = static_cast<int>(global_.size());
    ranges_ = {{0, total_layers_}};
  }
  ST_CHECK(layers_.size() < global_.size(), ValueError,
           "add_layer: more layers than the ranges set by set_layer_ranges");
  layer->set_scope(scope);
  register_module(scope, layer);
  layers_.push_back(std::move(layer));
}

Tensor LanguageModel::loss(const Tensor& logits, const Tensor& targets) const { return lm_loss(logits, targets); }

void LanguageModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  load_state_dict(full, strict);
}

std::vector<std::string> LanguageModel::tied_names() const {
  std::map<std::string, int> count;
  for (auto& l : layers_)
    for (auto& [n, p] : l->full_named_parameters()) count[n]++;
  std::vector<std::string> out;
  for (auto& [n, c] : count)
    if (c > 1) out.push_back(n);
  return out;
}

double LanguageModel::flops_per_token(int64_t seq_len) const {
  double f = 0;
  for (auto& l : layers_) f += l->cost(seq_len).flops_per_token;
  return f;
}

}  // namespace st::runtime
