// Module: names, tying by identity, strict state dicts (errors name the key), in-place casts,
// train/eval propagation, parameter counts.
#include <gtest/gtest.h>

#include "runtime/nn/module.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

struct Leaf : Module {
  Leaf(int64_t n) {
    w = register_parameter("weight", Tensor::ones({n, 2}));
    b = register_parameter("bias", Tensor::zeros({2}));
  }
  Tensor w, b;
};

struct Tree : Module {
  Tree() {
    a = register_module("enc.a", std::make_shared<Leaf>(3));
    b = register_module("enc.b", std::make_shared<Leaf>(4));
    shared = register_module("", std::make_shared<Module>());
  }
  std::shared_ptr<Leaf> a, b;
  std::shared_ptr<Module> shared;
};

std::vector<std::string> names(const NamedTensors& nt) {
  std::vector<std::string> out;
  for (auto& [n, t] : nt) out.push_back(n);
  return out;
}

TEST(Module, FullNamesInRegistrationOrder) {
  Tree t;
  EXPECT_EQ(names(t.named_parameters()),
            (std::vector<std::string>{"enc.a.weight", "enc.a.bias", "enc.b.weight", "enc.b.bias"}));
  EXPECT_EQ(names(t.named_parameters("model")).front(), "model.enc.a.weight");
  EXPECT_EQ(t.num_parameters(), 3 * 2 + 2 + 4 * 2 + 2);
  EXPECT_TRUE(t.a->w.requires_grad());
  EXPECT_TRUE(t.parameter("enc.b.bias").same(t.b->b));
  EXPECT_THROW(t.parameter("enc.c.bias"), ValueError);
}

TEST(Module, TiedTensorIsListedOnceUnderItsFirstName) {
  struct Tied : Module {
    Tied() {
      first = register_module("first", std::make_shared<Leaf>(3));
      auto second = std::make_shared<Module>();
      second->register_parameter("tied", first->w);
      register_module("second", second);
    }
    std::shared_ptr<Leaf> first;
  } t;
  EXPECT_EQ(names(t.named_parameters()), (std::vector<std::string>{"first.weight", "first.bias"}));
  EXPECT_EQ(t.num_parameters(), 8);
}

TEST(Module, TwoTensorsUnderOneNameAreAnError) {
  Module m;
  m.register_module("x", std::make_shared<Leaf>(2));
  m.register_module("x", std::make_shared<Leaf>(2));
  EXPECT_THROW(m.named_parameters(), ValueError);
  Module n;
  n.register_parameter("p", Tensor::zeros({1}));
  EXPECT_THROW(n.register_parameter("p", Tensor::zeros({1})), ValueError);
  EXPECT_THROW(n.register_parameter("", Tensor::zeros({1})), ValueError);
}

std::string error_of(Module& m, const std::map<std::string, Tensor>& sd, bool strict = true) {
  try {
    m.load_state_dict(sd, strict);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(Module, LoadStateDictIsStrictAndNamesTheKey) {
  Leaf m(3);
  std::map<std::string, Tensor> sd = {{"weight", Tensor::full({3, 2}, 2.0)}, {"bias", Tensor::full({2}, 3.0)}};
  EXPECT_EQ(error_of(m, sd), "");
  EXPECT_EQ(m.w.to_double(), std::vector<double>(6, 2.0));
  EXPECT_EQ(m.b.to_double(), std::vector<double>(2, 3.0));

  auto missing = sd;
  missing.erase("bias");
  EXPECT_NE(error_of(m, missing).find("missing key 'bias'"), std::string::npos);
  auto extra = sd;
  extra["other"] = Tensor::zeros({1});
  EXPECT_NE(error_of(m, extra).find("unexpected key 'other'"), std::string::npos);
  EXPECT_EQ(error_of(m, extra, /*strict=*/false), "");
  auto wrong = sd;
  wrong["weight"] = Tensor::zeros({2, 3});
  std::string e = error_of(m, wrong);
  EXPECT_NE(e.find("'weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3)"), std::string::npos) << e;
  // a failed load changes nothing
  wrong["bias"] = Tensor::full({2}, 9.0);
  error_of(m, wrong);
  EXPECT_EQ(m.b.to_double(), std::vector<double>(2, 3.0));
  // dtype converts (an f16 file into an f32 model)
  EXPECT_EQ(error_of(m, {{"weight", Tensor::full({3, 2}, 0.5, DType::f16)}, {"bias", Tensor::zeros({2})}}), "");
  EXPECT_EQ(m.w.to_double(), std::vector<double>(6, 0.5));
}

TEST(Module, StateDictAliasesTheParameters) {
  Leaf m(2);
  auto sd = m.state_dict();
  sd[0].second.fill_(4.0);
  EXPECT_EQ(m.w.to_double(), std::vector<double>(4, 4.0));
  EXPECT_FALSE(sd[0].second.requires_grad());
}

TEST(Module, CastKeepsIdentityForEveryHolder) {
  Leaf m(2);
  Tensor alias = m.w;  // e.g. a tied head holding the same tensor
  m.w.detach().fill_(1.0 / 3.0);
  m.cast_parameters(DType::bf16);
  EXPECT_EQ(alias.dtype(), DType::bf16);
  EXPECT_EQ(m.parameter("weight").dtype(), DType::bf16);
  EXPECT_EQ(alias.to_double()[0], bf16_bits_to_f32(f32_to_bf16_bits(1.f / 3.f)));
  EXPECT_TRUE(alias.requires_grad());
  EXPECT_THROW(m.cast_parameters(DType::i32), DTypeError);
}

TEST(Module, TrainEvalReachesChildren) {
  Tree t;
  EXPECT_TRUE(t.a->is_training());
  t.eval();
  EXPECT_FALSE(t.a->is_training());
  EXPECT_FALSE(t.b->is_training());
  t.train();
  EXPECT_TRUE(t.b->is_training());
}

TEST(Module, ZeroGradDropsGradients) {
  Leaf m(2);
  m.w.set_grad(Tensor::ones({2, 2}));
  EXPECT_TRUE(m.w.grad().defined());
  m.zero_grad();
  EXPECT_FALSE(m.w.grad().defined());
}

}  // namespace
}  // namespace st::runtime
