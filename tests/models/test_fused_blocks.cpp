// The blocks that run their layernorms fused with the residual stream (ops/add_layernorm.h) give
// the bits of the unfused ops they replaced: the GPT-2 decoder block (pre-LN: ln_1 with the residual's gradient,
// x + drop(attn) → ln_2) and StEncoderLayer (post-LN: norm(x + drop(…)) twice) against the same
// modules run through ops::add, Dropout::forward and LayerNorm::forward, in f32 and bf16, without
// and with dropout, inside a training step's DropoutScope and outside one (generator draws):
// output, the input's gradient (the input a non-leaf, as in a model) and every parameter's.
// A model is these blocks between unchanged layers, so its loss and gradients keep their bits.
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "models/gpt.h"
#include "models/simple_transformer.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "runtime/nn/dropout_context.h"
#include "tensor/autograd.h"

namespace st {
namespace {

// A GPT-2 block of width C, H heads, MLP 4C and residual dropout p (models/gpt.h's description).
models::DecoderSpec gpt_block(int64_t C, int64_t H, double p) {
  models::GptConfig c;
  c.n_embd = C;
  c.n_head = H;
  c.resid_pdrop = p;
  return models::gpt_spec(c);
}


using models::Dropout;

struct Bits {
  std::vector<double> out, dx;
  std::vector<std::vector<double>> grads;  // in named_parameters() order
};

constexpr uint64_t kSeed = 99, kOffset = 7;
constexpr int kSite = 3;

// The block's parameters drawn from a fixed stream (LayerNorm weights around 1), then cast.
void init(runtime::Layer& layer, DType dt) {
  Generator g(5);
  NoGradGuard ng;
  for (auto& [name, p] : layer.named_parameters()) {
    Tensor t = p.detach();
    const bool ln = name.find("ln_") != std::string::npos || name.find("norm") != std::string::npos;
    fill_uniform(t, g, ln ? 0.5f : -0.3f, ln ? 1.5f : 0.3f);
  }
  layer.cast_parameters(dt);
}

// forward(x) → out; backward with a fixed cotangent; x (2, 5, C) a view of a leaf.
template <class Fwd>
Bits run(runtime::Layer& layer, DType dt, int64_t C, bool scoped, Generator& gen, Fwd fwd) {
  for (const Tensor& p : layer.parameters()) Tensor(p).zero_grad(true);
  gen.set_state(kSeed, kOffset);
  Generator g(11);
  Tensor x0 = Tensor::empty({2, 5, C}), u = Tensor::empty({2, 5, C});
  fill_uniform(x0, g, -2.f, 2.f);
  fill_uniform(u, g, -1.f, 1.f);
  Tensor leaf = x0.to(dt).detach();
  leaf.requires_grad_();
  std::optional<runtime::DropoutScope> scope;
  if (scoped) scope.emplace(/*step=*/4, /*first_sample=*/6);
  Tensor out = fwd(leaf.view({2, 5, C}));
  out.backward(u.to(dt));
  Bits b{out.to_double(), leaf.grad().to_double(), {}};
  for (const Tensor& p : layer.parameters()) b.grads.push_back(p.grad().to_double());
  return b;
}

void expect_same(const Bits& fused, const Bits& unfused, const std::string& what) {
  EXPECT_EQ(fused.out, unfused.out) << what;  // element bits; no tolerance
  EXPECT_EQ(fused.dx, unfused.dx) << what;
  ASSERT_EQ(fused.grads.size(), unfused.grads.size()) << what;
  for (size_t i = 0; i < fused.grads.size(); ++i) EXPECT_EQ(fused.grads[i], unfused.grads[i]) << what << " param " << i;
}

std::string label(DType dt, double p, bool scoped) {
  return std::string(dtype_name(dt)) + " p=" + std::to_string(p) + (scoped ? " in a DropoutScope" : " drawing");
}

}  // namespace

TEST(FusedBlocks, GptBlockKeepsTheUnfusedBits) {
  const int64_t C = 32;
  for (DType dt : {DType::f32, DType::bf16})
    for (double p : {0.0, 0.1})
      for (bool scoped : {false, true}) {
        auto gen = std::make_shared<Generator>(kSeed);
        models::DecoderBlock blk(gpt_block(C, 4, p), nullptr, gen, kSite);
        init(blk, dt);
        Bits fused = run(blk, dt, C, scoped, *gen, [&](const Tensor& x) { return blk.forward(x); });
        Dropout drop(p, gen, kSite);  // the block's site: the same counters
        Bits unfused = run(blk, dt, C, scoped, *gen, [&](const Tensor& x) {
          Tensor h = ops::add(x, drop.forward(blk.attention(blk.norm1().forward(x)), true));
          return ops::add(h, drop.forward(blk.mlp(blk.norm2().forward(h)), true));
        });
        expect_same(fused, unfused, "GPT block " + label(dt, p, scoped));
        if (p > 0) {  // the masks are real: without dropout the output differs
          auto gen0 = std::make_shared<Generator>(kSeed);
          models::DecoderBlock blk0(gpt_block(C, 4, 0.0), nullptr, gen0, kSite);
          init(blk0, dt);
          EXPECT_NE(run(blk0, dt, C, scoped, *gen0, [&](const Tensor& x) { return blk0.forward(x); }).out, fused.out);
        }
      }
}

TEST(FusedBlocks, EncoderLayerKeepsTheUnfusedBits) {
  const int64_t D = 32;
  for (DType dt : {DType::f32, DType::bf16})
    for (double p : {0.0, 0.1})
      for (bool scoped : {false, true}) {
        auto gen = std::make_shared<Generator>(kSeed);
        models::StEncoderLayer layer(D, 4, 64, p, 1e-5, gen, kSite);
        init(layer, dt);
        Bits fused = run(layer, dt, D, scoped, *gen, [&](const Tensor& x) { return layer.forward(x); });
        Dropout drop(p, gen, kSite);
        Bits unfused = run(layer, dt, D, scoped, *gen, [&](const Tensor& x) {
          Tensor a = layer.out_proj->forward(models::causal_self_attention(layer.in_proj->forward(x), 4, D / 4));
          Tensor h = layer.norm1->forward(ops::add(x, drop.forward(a, true)));
          Tensor f = layer.linear2->forward(drop.forward(ops::relu(layer.linear1->forward(h)), true));
          return layer.norm2->forward(ops::add(h, drop.forward(f, true)));
        });
        expect_same(fused, unfused, "encoder layer " + label(dt, p, scoped));
      }
}

}  // namespace st
