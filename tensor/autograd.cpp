// The autograd engine: dependency counting, then nodes in reverse creation order.
#include "tensor/autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace st {
namespace {
thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_node_seq{0};
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

bool any_requires_grad(std::initializer_list<Tensor> ts) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool any_requires_grad(const std::vector<Tensor>& ts) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
std::shared_ptr<Node> make_node(std::string name, std::vector<Tensor> inputs, GradAttach when) {
  if (when == GradAttach::if_an_input_requires_grad ? !any_requires_grad(inputs) : !t_grad_enabled) return nullptr;
  auto node = std::make_shared<Node>();
  node->name = std::move(name);
  node->inputs = std::move(inputs);
  node->seq = g_node_seq.fetch_add(1);
  node->layer = current_memory_layer();  // "h.3 forward" → "h.3 backward" (a recompute's replay already says backward)
  if (node->layer.ends_with(" forward")) node->layer.replace(node->layer.size() - 7, 7, "backward");
  return node;
}
}  // namespace

void attach_grad_fn(Tensor& out, std::string name, std::vector<Tensor> inputs, BackwardFn fn, GradAttach when) {
  std::shared_ptr<Node> node = make_node(std::move(name), std::move(inputs), when);
  if (!node) return;
  node->backward = std::move(fn);
  TensorImpl* impl = out.impl_ptr();
  impl->grad_fn = std::move(node);
  impl->grad_fn_output = 0;
  impl->requires_grad = true;
}

void attach_grad_fn(const std::vector<Tensor*>& outs, std::string name, std::vector<Tensor> inputs,
                    MultiBackwardFn fn, GradAttach when) {
  for (size_t k = 0; k < outs.size(); ++k) {
    for (const Tensor& in : inputs)
      if (in.defined() && in.same(*outs[k]))
        ST_THROW(AutogradError, name << ": output " << k << " is also an input (give it a TensorImpl of its own)");
    for (size_t j = 0; j < k; ++j)
      if (outs[j]->same(*outs[k])) ST_THROW(AutogradError, name << ": outputs " << j << " and " << k << " are one tensor");
  }
  std::shared_ptr<Node> node = make_node(std::move(name), std::move(inputs), when);
  if (!node) return;
  node->backward_multi = std::move(fn);
  node->n_outputs = static_cast<uint32_t>(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    TensorImpl* impl = outs[k]->impl_ptr();
    impl->grad_fn = node;
    impl->grad_fn_output = static_cast<uint32_t>(k);
    impl->requires_grad = true;
  }
}

namespace {

struct BySeq {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }  // max-heap on seq
};

void accumulate_leaf(const Tensor& leaf, const Tensor& g) {
  if (g.shape() != leaf.shape())
    ST_THROW(AutogradError, "backward: gradient " << shape_str(g.shape()) << " for leaf " << shape_str(leaf.shape())
                                                  << (leaf.name().empty() ? "" : " '" + leaf.name() + "'"));
  Tensor cur = leaf.grad();
  if (cur.defined()) {
    cur.add_(g);  // += : accumulation over backward passes
  } else {
    // a parameter's .grad() counts as gradient memory wherever backward runs (another leaf's,
    // e.g. a pipeline stage's received activation, stays in the current category)
    const bool param = leaf.storage() && leaf.storage()->category() == MemoryCategory::params;
    MemoryCategoryScope mem(param ? MemoryCategory::grads : current_memory_category());
    Tensor fresh = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device());
    fresh.copy_(g);  // a copy: g may alias another gradient
    Tensor(leaf).set_grad(fresh);
  }
}

void fire_hooks(const Tensor& leaf) {
  for (auto& h : leaf.impl_ptr()->grad_ready_hooks) h(leaf);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  if (!root.requires_grad())
    ST_THROW(AutogradError, "backward: tensor " << root.describe() << " does not require grad");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    if (root.numel() != 1)
      ST_THROW(AutogradError, "backward: a gradient is needed for non-scalar " << shape_str(root.shape()));
    grad = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  if (grad.shape() != root.shape())
    ST_THROW(AutogradError, "backward: gradient " << shape_str(grad.shape()) << " for " << shape_str(root.shape()));

  NoGradGuard no_grad;
  if (root.is_leaf()) {
    accumulate_leaf(root, grad);
    fire_hooks(root);
    return;
  }

  // 1. Count, for every reachable node, how many edges lead to it, and for every leaf that
  //    requires grad, how many contributions it will receive.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<TensorImpl*, int> leaf_pending;
  {
    std::vector<Node*> stack{root.grad_fn().get()};
    std::unordered_set<Node*> seen{root.grad_fn().get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (n->released)
        ST_THROW(AutogradError, "backward through the graph a second time ('" << n->name
                                                                             << "'): pass retain_graph=true the first time");
      for (const Tensor& in : n->inputs) {
        if (!in.defined() || !in.requires_grad()) continue;
        if (Node* p = in.grad_fn().get()) {
          ++deps[p];
          if (seen.insert(p).second) stack.push_back(p);
        } else {
          ++leaf_pending[in.impl_ptr()];
        }
      }
    }
  }

  // 2. Run nodes whose consumers have all delivered, latest-created first. grads[n][k]: what
  //    output k of node n has received so far (summed in arrival order).
  std::unordered_map<Node*, std::vector<Tensor>> grads;
  auto slot = [&grads](Node* p, uint32_t k) -> Tensor& {
    std::vector<Tensor>& v = grads[p];
    if (v.size() < p->n_outputs) v.resize(p->n_outputs);
    return v[k];
  };
  auto received = [&grads](Node* p) {
    auto it = grads.find(p);
    if (it == grads.end()) return false;
    for (const Tensor& t : it->second)
      if (t.defined()) return true;
    return false;
  };
  std::priority_queue<Node*, std::vector<Node*>, BySeq> ready;
  slot(root.grad_fn().get(), root.impl_ptr()->grad_fn_output) = grad;
  ready.push(root.grad_fn().get());
  std::vector<std::shared_ptr<Node>> keep_alive{root.grad_fn()};

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> g = std::move(grads[n]);
    grads.erase(n);
    g.resize(n->n_outputs);
    std::vector<Tensor> in_grads;
    {
      MemoryLayerScope layer(n->layer);  // its gradients' allocations name the layer that made the node
      in_grads = n->n_outputs == 1 ? n->backward(g[0]) : n->backward_multi(g);
    }
    if (in_grads.size() != n->inputs.size())
      ST_THROW(AutogradError, "backward of '" << n->name << "' returned " << in_grads.size() << " gradients for "
                                              << n->inputs.size() << " inputs");
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Tensor& in = n->inputs[i];
      if (!in.defined() || !in.requires_grad()) continue;
      const Tensor& gi = in_grads[i];
      if (gi.defined() && gi.shape() != in.shape())
        ST_THROW(AutogradError, "backward of '" << n->name << "': gradient " << shape_str(gi.shape())
                                                << " for input " << i << " of shape " << shape_str(in.shape()));
      if (Node* p = in.grad_fn().get()) {
        if (gi.defined()) {
          Tensor& cur = slot(p, in.impl_ptr()->grad_fn_output);
          if (!cur.defined()) {
            cur = gi;
          } else {
            Tensor sum = cur.clone();  // never write into a gradient another node may alias
            sum.add_(gi);
            cur = sum;
          }
        }
        if (--deps[p] == 0) {
          keep_alive.push_back(in.grad_fn());
          if (received(p)) {
            ready.push(p);
          } else {  // nothing flowed into this branch: its inputs get no contribution from it
            std::vector<Node*> dead{p};
            while (!dead.empty()) {
              Node* d = dead.back();
              dead.pop_back();
              grads.erase(d);
              for (const Tensor& din : d->inputs) {
                if (!din.defined() || !din.requires_grad()) continue;
                if (Node* q = din.grad_fn().get()) {
                  if (--deps[q] == 0) {
                    if (received(q)) ready.push(q); else dead.push_back(q);
                  }
                } else if (--leaf_pending[din.impl_ptr()] == 0) {
                  fire_hooks(din);
                }
              }
            }
          }
        }
      } else {
        if (gi.defined()) accumulate_leaf(in, gi);
        if (--leaf_pending[in.impl_ptr()] == 0) fire_hooks(in);
      }
    }
    if (!retain_graph) {
      n->backward = nullptr;
      n->backward_multi = nullptr;
      n->inputs.clear();
      n->released = true;
    }
  }
}

}  // namespace st
