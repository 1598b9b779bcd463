// The engine: accumulation (+=), retain_graph, no_grad, detach, hooks firing when final, nodes
// with several outputs (one backward call with every output's summed gradient).
// Uses only the tensor core's own differentiable methods (views, casts); ops' gradients are
// tested by the op harness in tests/ops.
#include <gtest/gtest.h>

#include <algorithm>

#include "tensor/autograd.h"

using namespace st;

namespace {
Tensor param(std::vector<float> v, Shape s) {
  Tensor t = Tensor::from_vector(v, s);
  t.requires_grad_();
  return t;
}
// A two-output op for the engine tests: (u, v) = (2x, 3x) elementwise, one node; its backward
// gets (du, dv) (either may be undefined) and returns dx = 2·du + 3·dv. `calls` counts backward runs,
// `seen` records which output gradients arrived defined.
struct TwoOut {
  Tensor u, v;
};
TwoOut two_out(const Tensor& x, int* calls, std::vector<std::string>* seen) {
  std::vector<double> xv = x.to_double(), u, v;
  for (double e : xv) u.push_back(2 * e), v.push_back(3 * e);
  TwoOut o{Tensor::from_vector(u, x.shape()), Tensor::from_vector(v, x.shape())};
  attach_grad_fn({&o.u, &o.v}, "two_out", {x}, [calls, seen](const std::vector<Tensor>& g) {
    ++*calls;
    seen->push_back(std::string(g[0].defined() ? "du" : "-") + (g[1].defined() ? "dv" : "-"));
    const Tensor& any = g[0].defined() ? g[0] : g[1];
    Tensor dx = Tensor::zeros(any.shape());
    if (g[0].defined()) dx.add_(g[0], 2.0);
    if (g[1].defined()) dx.add_(g[1], 3.0);
    return std::vector<Tensor>{dx};
  });
  return o;
}
}  // namespace

TEST(Autograd, NodeWithTwoOutputsRunsOnceWithBothGradients) {
  Tensor p = param({1, 2}, {2});
  int calls = 0;
  std::vector<std::string> seen;
  TwoOut o = two_out(p.reshape({2, 1}), &calls, &seen);  // an interior node, behind a view
  EXPECT_EQ(o.u.grad_fn(), o.v.grad_fn());
  // u is consumed twice (its gradient is the sum, 1 + 1 per element), v once through a view
  Tensor out = Tensor::cat({o.u, o.u, o.v.reshape({1, 2}).transpose(0, 1)}, 0);  // (6, 1)
  out.backward(Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 10, 20}, {6, 1}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<std::string>{"dudv"}));
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{2 * 2 + 3 * 10, 2 * 2 + 3 * 20}));
}

TEST(Autograd, NodeWithTwoOutputsWhenOnlyOneGetsAGradient) {
  for (int which = 0; which < 2; ++which) {
    Tensor p = param({1, 2}, {2});
    int calls = 0;
    std::vector<std::string> seen;
    TwoOut o = two_out(p.reshape({2}), &calls, &seen);
    // the other output is used too, by a branch the loss does not reach
    Tensor unused = (which == 0 ? o.v : o.u).reshape({2, 1});
    (which == 0 ? o.u : o.v).reshape({1, 2}).backward(Tensor::ones({1, 2}));
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(seen, (std::vector<std::string>{which == 0 ? "du-" : "-dv"}));
    EXPECT_EQ(p.grad().to_double(), (std::vector<double>(2, which == 0 ? 2.0 : 3.0)));
  }
}

TEST(Autograd, NodeWithTwoOutputsRejectsAliasedOutputs) {
  Tensor p = param({1, 2}, {2});
  Tensor y = Tensor::zeros({2});
  auto fn = [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; };
  EXPECT_THROW(attach_grad_fn({&y, &y}, "bad", {p}, fn), AutogradError);
  EXPECT_THROW(attach_grad_fn({&y, &p}, "bad", {p}, fn), AutogradError);
}

TEST(Autograd, ViewsRouteGradientsBack) {
  Tensor p = param({1, 2, 3, 4, 5, 6}, {2, 3});
  // out = cat(narrow(p^T, 0, 1..3), p^T[0]) (4, 2): gradient counts how often each element is used
  Tensor pt = p.transpose(0, 1);                      // (3, 2)
  Tensor out = Tensor::cat({pt.narrow(0, 1, 2), pt.narrow(0, 0, 1), pt.narrow(0, 0, 1)}, 0);  // (4, 2)
  out.backward(Tensor::ones({4, 2}));
  // p[:, 0] is used twice (pt row 0), the rest once.
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{2, 1, 1, 2, 1, 1}));
}

TEST(Autograd, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor p = param({1, 2}, {2});
  Tensor g = Tensor::from_vector(std::vector<float>{0.5, -1}, {2});
  p.reshape({2, 1}).backward(g.reshape({2, 1}));
  p.reshape({1, 2}).backward(g.reshape({1, 2}));
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{1.0, -2.0}));
  p.zero_grad();
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{0, 0}));
  p.zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(p.grad().defined());
}

TEST(Autograd, RetainGraphAndReleasedGraph) {
  Tensor p = param({1, 2, 3}, {3});
  Tensor y = p.reshape({3, 1}).to(DType::bf16).to(DType::f32);
  Tensor g = Tensor::ones({3, 1});
  y.backward(g, /*retain_graph=*/true);
  y.backward(g);
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{2, 2, 2}));
  EXPECT_THROW(y.backward(g), AutogradError);
}

TEST(Autograd, NoGradAndDetach) {
  Tensor p = param({1, 2}, {2});
  {
    NoGradGuard ng;
    Tensor y = p.reshape({2, 1});
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor d = p.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), p.storage());
  EXPECT_THROW(d.reshape({2, 1}).backward(Tensor::ones({2, 1})), AutogradError);
}

TEST(Autograd, GradReadyHookFiresOnceWhenFinal) {
  // p feeds two branches; the hook must fire once, after both contributions are in.
  Tensor p = param({1, 2, 3, 4}, {4});
  Tensor q = param({5, 6}, {2});
  std::vector<std::string> events;
  p.add_grad_ready_hook([&](const Tensor& t) {
    events.push_back("p:" + std::to_string(t.grad().to_double()[0]));
  });
  q.add_grad_ready_hook([&](const Tensor&) { events.push_back("q"); });
  Tensor a = p.narrow(0, 0, 2);                 // p[0:2]
  Tensor b = p.narrow(0, 1, 2);                 // p[1:3]
  Tensor out = Tensor::cat({a, q, b}, 0);       // (6,)
  out.backward(Tensor::ones({6}));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::count(events.begin(), events.end(), "q"), 1);
  EXPECT_EQ(std::count(events.begin(), events.end(), "p:1.000000"), 1);
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{1, 2, 1, 0}));
}

TEST(Autograd, ErrorsAreTyped) {
  Tensor t = Tensor::ones({2});
  EXPECT_THROW(t.backward(), AutogradError);  // does not require grad
  Tensor p = param({1, 2}, {2});
  EXPECT_THROW(p.reshape({2, 1}).backward(), AutogradError);  // non-scalar without a gradient
  EXPECT_THROW(Tensor::arange(3).requires_grad_(), DTypeError);
}
