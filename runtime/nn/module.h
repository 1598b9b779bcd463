// Module: named parameters (leaf tensors that require grad) and named children, like
// torch.nn.Module without the magic. A model is a tree; a parameter's full name is the path of
// child names joined by '.', e.g. "transformer.h.0.attn.c_attn.weight".
//
// Sharing (weight tying) is by identity: one tensor may be registered under several paths (the
// GPT's wte is held by its first and its last layer); named_parameters() lists it once, under
// the first path met in registration order (PyTorch's rule). Child names may repeat (two layers
// both scoped "transformer") as long as the full names they produce are unique.
//
// Layer: a Module with a single-tensor forward — the unit a pipeline stage is cut from. A
// LanguageModel (runtime/nn/language_model.h) is an ordered list of Layers.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/named_tensors.h"
#include "tensor/tensor.h"

namespace st::runtime {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Registers a floating tensor as a parameter of this module (marks it requires_grad); the
  // name is local (no dots needed). Throws ValueError on an empty or repeated name.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Registers a child; `name` is its path prefix and may contain dots, repeat, or be empty (the
  // child's parameters then sit directly under this module's prefix).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }

  // Every parameter once, full names (`prefix` + path), in registration order (depth first).
  // Throws ValueError when two different tensors would get the same full name.
  NamedTensors named_parameters(const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;  // elements, shared tensors counted once
  int64_t param_bytes() const;     // bytes in the parameters' current dtype, shared tensors once
  Tensor parameter(const std::string& full_name) const;  // throws ValueError when absent

  // The parameters as (name → tensor), same order; the tensors are the live parameters detached
  // (writing through them changes the model).
  NamedTensors state_dict() const;
  // Copies every tensor of `sd` into the parameter of that name (converting dtype and device).
  // strict: a missing key, an unexpected key or a shape mismatch throws ValueError naming the
  // key; non-strict ignores unexpected keys (a missing key or wrong shape still throws).
  void load_state_dict(const std::map<std::string, Tensor>& sd, bool strict = true);

  // Train/eval flag of this module and all children (dropout reads it).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad(bool set_to_none = true);
  // Converts every floating parameter to `dtype` / `device` IN PLACE: the tensor object keeps its
  // identity (every module holding it, tied copies included, sees the change); the gradient is
  // dropped. Not differentiable; call between steps.
  void cast_parameters(DType dtype);
  void move_parameters(Device device);

  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  const std::vector<std::pair<std::string, Tensor>>& local_parameters() const { return params_; }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> child);

 private:
  void collect(const std::string& prefix, NamedTensors& out, std::map<const TensorImpl*, std::string>& seen,
               std::map<std::string, const TensorImpl*>& names) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Cost of one layer for the stage partitioner (runtime/common/partition.h).
struct LayerCost {
  double param_bytes = 0;       // bytes of the parameters this layer holds (tied copies included)
  double flops_per_token = 0;   // forward FLOPs per token at the given sequence length (×3 for fwd+bwd)
};

class Layer : public Module {
 public:
  // x: token ids (B, T) i64 for a first layer, hidden (B, T, C) otherwise → the next layer's input.
  virtual Tensor forward(const Tensor& x) = 0;
  virtual LayerCost cost(int64_t seq_len) const = 0;
  // Full-name prefix of this layer inside its model ("transformer.h.3"); set by the model.
  const std::string& scope() const { return scope_; }
  void set_scope(std::string s) { scope_ = std::move(s); }
  // The parameters under their full model names (what checkpoints use whatever the layer split).
  NamedTensors full_named_parameters() const { return named_parameters(scope_); }

 private:
  std::string scope_;
};

// Replaces the data of `param` (dtype, device, storage) by `src`'s, keeping the tensor's
// identity; drops its gradient. Used by cast/move and by optimizers' master copies.
void replace_tensor_data(const Tensor& param, const Tensor& src);

}  // namespace st::runtime
