// The engine: accumulation (+=), retain_graph, no_grad, detach, hooks firing when final.
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
}  // namespace

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
