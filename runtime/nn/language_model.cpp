// LanguageModel: the layer list and what is derived from it.
#include "runtime/nn/language_model.h"

#include <map>

#include "runtime/nn/lm_loss.h"
#include "runtime/nn/recompute.h"

namespace st::runtime {

Tensor LanguageModel::forward(const Tensor& tokens) {
  ST_CHECK(!layers_.empty(), ValueError, "LanguageModel::forward: the model has no layers");
  return forward_layers(tokens, 0, layers_.size());
}

Tensor LanguageModel::forward_layers(const Tensor& x_in, size_t begin, size_t end) {
  Tensor x = x_in;
  for (size_t i = begin; i < end; ++i)
    x = recompute_ && recomputable(i) ? forward_recomputed(*layers_[i], x, gen_.get()) : layers_[i]->forward(x);
  return x;
}

void LanguageModel::add_layer(const std::string& scope, std::shared_ptr<Layer> layer) {
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
