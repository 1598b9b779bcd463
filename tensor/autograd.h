// Reverse-mode autograd in the style of flashlight's Variable: every differentiable op attaches
// one Node to its output. A Node holds its differentiable inputs (the graph's edges) and a
// backward function (a lambda capturing only what backward needs) that maps the output's gradient
// to one gradient per input (undefined = no contribution). An op with several outputs (a fused op
// whose outputs are consumed apart, e.g. ops::add_layernorm's residual and normalised rows)
// attaches one Node to all of them: its backward gets one gradient per output, each the sum of
// what that output's consumers delivered (undefined when none did), and runs once.
//
// The engine walks the graph once to count dependencies, then runs nodes in reverse creation
// order as soon as all their consumers have delivered gradients. Leaves (parameters) accumulate
// with += into .grad() — so gradient accumulation over micro-batches is just several backward()
// calls — and a leaf's grad-ready hooks fire as soon as its last contribution of this pass has
// been added, while the rest of backward continues (data-parallel buckets hang on them).
//
// Backward runs with grad mode off (no double backward). Without retain_graph the graph's
// closures are released after use and a second backward through them throws AutogradError.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace st {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out)>;
// grads_out: one per output, in the order the outputs were attached; undefined = none arrived
using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads_out)>;

struct Node {
  std::string name;             // op name, for errors and traces
  std::vector<Tensor> inputs;   // differentiable inputs (entries that need no grad are kept too)
  BackwardFn backward;          // one output
  MultiBackwardFn backward_multi;  // n_outputs > 1
  uint32_t n_outputs = 1;
  uint64_t seq = 0;             // creation order; later nodes run first
  std::string layer;            // the memory layer current at creation (tensor/memory_category.h), for --max-memory's error
  bool released = false;
};

// Grad mode is thread-local; NoGradGuard switches it off for its scope.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
// EnableGradGuard switches grad mode on for its scope (inside a backward function that re-runs a
// forward to build a graph, e.g. activation recompute: runtime/nn/recompute.h).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any of the tensors requires grad.
bool any_requires_grad(std::initializer_list<Tensor> ts);
bool any_requires_grad(const std::vector<Tensor>& ts);

// When a gradient function is attached: normally only if grad mode is on and an input requires
// grad; `in_grad_mode` attaches whenever grad mode is on, for a node whose backward has effects
// beyond its inputs (activation recompute's nested backward accumulates into parameters that are
// not among its inputs).
enum class GradAttach { if_an_input_requires_grad, in_grad_mode };
// Makes `out` the result of a differentiable op (else does nothing, see GradAttach).
void attach_grad_fn(Tensor& out, std::string name, std::vector<Tensor> inputs, BackwardFn fn,
                    GradAttach when = GradAttach::if_an_input_requires_grad);
// The same for an op with several outputs: one Node for all of `outs` (distinct tensors, none of
// them an input), output k being outs[k]; fn gets their gradients in that order.
void attach_grad_fn(const std::vector<Tensor*>& outs, std::string name, std::vector<Tensor> inputs,
                    MultiBackwardFn fn, GradAttach when = GradAttach::if_an_input_requires_grad);

// The engine; Tensor::backward calls this.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace st
