// Activation recompute against the plain forward, same generator seed, dropout 0.1:
//  - GPT (3 layers, d 32, 4 heads, vocab 50, T 16, B 2) and SimpleTransformer (same sizes, FFN 64):
//    loss and every parameter gradient BIT-identical with recompute on the blocks, over one
//    micro-batch and with accumulation over 2; also with the token-id first layer recomputed;
//    the generator ends at the same offset (the rewind is undone after each recompute).
//  - grad-ready hooks on the block parameters fire exactly once per backward, with the final value.
//  - memory: bytes held after the forward (cpu_bytes_in_use after the loss minus before the
//    forward) on a GPT of 6 layers, d 128, T 128, B 8: recompute holds under 1/8 of the plain
//    forward's (measured ratio 0.047); both numbers printed.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "models/gpt.h"
#include "models/simple_transformer.h"
#include "ops/cross_entropy.h"
#include "runtime/nn/recompute.h"
#include "tensor/autograd.h"
#include "tensor/storage.h"

namespace st {
namespace {

using runtime::LanguageModel;

constexpr uint64_t kDropoutSeed = 1234;

std::shared_ptr<LanguageModel> make_gpt(int64_t layers, int64_t d, int64_t heads, int64_t vocab, int64_t T) {
  models::GptConfig c;
  c.n_layer = layers;
  c.n_embd = d;
  c.n_head = heads;
  c.vocab_size = vocab;
  c.n_positions = T;
  c.embd_pdrop = 0.1;
  c.resid_pdrop = 0.1;
  auto m = std::make_shared<models::Gpt>(c, std::make_shared<Generator>(kDropoutSeed));
  m->init_weights(7);
  return m;
}

std::shared_ptr<LanguageModel> make_simple_transformer() {
  models::SimpleTransformerConfig c;
  c.vocab = 50;
  c.d_model = 32;
  c.heads = 4;
  c.layers = 3;
  c.ffn = 64;
  c.max_len = 16;
  c.dropout = 0.1;
  auto m = std::make_shared<models::SimpleTransformer>(c, std::make_shared<Generator>(kDropoutSeed));
  m->init_weights(7);
  return m;
}

// Token ids (B, T) i64, a deterministic pattern that differs per micro-batch `mb`.
Tensor tokens(int64_t B, int64_t T, int64_t vocab, int64_t mb, int64_t shift) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) v[static_cast<size_t>(i)] = (i * 7 + mb * 13 + shift + (i / 5) * 3) % vocab;
  return Tensor::from_vector(v, {B, T});
}

enum class Mode {
  plain,       // every layer's own forward
  blocks,      // recompute every layer but the first (token ids) and the last (head)
  with_first,  // recompute every layer but the head, the token-id layer included
};

// tokens (B, T) → loss (), the layers run as `mode` says.
Tensor forward_loss(LanguageModel& m, const Tensor& ids, const Tensor& targets, Mode mode) {
  const auto& layers = m.layers();
  Tensor h = ids;
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool last = i + 1 == layers.size();
    const bool rc = (mode == Mode::blocks && i > 0 && !last) || (mode == Mode::with_first && !last);
    h = rc ? runtime::forward_recomputed(*layers[i], h, m.generator().get()) : layers[i]->forward(h);
  }
  return ops::cross_entropy(h, targets);
}

struct Result {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> grads;
  uint64_t gen_offset = 0;
};

// Zero grads, rewind the dropout generator, then `micro` forward+backward passes (grads +=).
Result train_pass(LanguageModel& m, int micro, Mode mode, int64_t B, int64_t T) {
  m.zero_grad(true);
  m.generator()->set_state(kDropoutSeed, 0);
  Result r;
  for (int mb = 0; mb < micro; ++mb) {
    Tensor loss = forward_loss(m, tokens(B, T, m.vocab_size(), mb, 0), tokens(B, T, m.vocab_size(), mb, 1), mode);
    r.losses.push_back(static_cast<float>(loss.item()));
    loss.backward();
  }
  for (auto& [name, p] : m.named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name;
    if (p.grad().defined()) r.grads[name] = p.grad().to_float();
  }
  r.gen_offset = m.generator()->offset();
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_identical(const Result& plain, const Result& rc) {
  ASSERT_EQ(plain.losses.size(), rc.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i)
    EXPECT_TRUE(same_bits({plain.losses[i]}, {rc.losses[i]})) << "loss " << i << ": " << plain.losses[i] << " vs "
                                                              << rc.losses[i];
  ASSERT_EQ(plain.grads.size(), rc.grads.size());
  for (auto& [name, g] : plain.grads) {
    auto it = rc.grads.find(name);
    ASSERT_NE(it, rc.grads.end()) << name;
    EXPECT_TRUE(same_bits(g, it->second)) << "gradient of " << name << " differs";
  }
  EXPECT_EQ(plain.gen_offset, rc.gen_offset);
}

void check_model(LanguageModel& m, int64_t B, int64_t T) {
  for (int micro : {1, 2}) {
    Result plain = train_pass(m, micro, Mode::plain, B, T);
    ASSERT_GT(plain.gen_offset, 0u) << "dropout must draw";
    ASSERT_GT(plain.losses[0], 0.f);
    {
      SCOPED_TRACE("blocks, micro " + std::to_string(micro));
      expect_identical(plain, train_pass(m, micro, Mode::blocks, B, T));
    }
    {
      SCOPED_TRACE("with first layer, micro " + std::to_string(micro));
      expect_identical(plain, train_pass(m, micro, Mode::with_first, B, T));
    }
  }
  // Dropout really acts: another generator seed changes the loss.
  Result a = train_pass(m, 1, Mode::plain, B, T);
  m.zero_grad(true);
  m.generator()->set_state(kDropoutSeed + 1, 0);
  Tensor loss = forward_loss(m, tokens(B, T, m.vocab_size(), 0, 0), tokens(B, T, m.vocab_size(), 0, 1), Mode::blocks);
  EXPECT_NE(static_cast<float>(loss.item()), a.losses[0]);
}

TEST(Recompute, GptBitIdentical) {
  auto m = make_gpt(3, 32, 4, 50, 16);
  check_model(*m, 2, 16);
}

TEST(Recompute, SimpleTransformerBitIdentical) {
  auto m = make_simple_transformer();
  check_model(*m, 2, 16);
}

TEST(Recompute, HooksFireOncePerBackwardWithTheFinalGradient) {
  auto m = make_gpt(3, 32, 4, 50, 16);
  const auto& layers = m->layers();
  std::map<TensorImpl*, int> fired;
  std::map<TensorImpl*, std::vector<float>> seen;
  std::vector<Tensor> watched;
  for (size_t i = 1; i + 1 < layers.size(); ++i)
    for (Tensor p : layers[i]->parameters()) {
      watched.push_back(p);
      p.add_grad_ready_hook([&](const Tensor& t) {
        fired[t.impl_ptr()]++;
        seen[t.impl_ptr()] = t.grad().to_float();
      });
    }
  ASSERT_EQ(watched.size(), 3u * 12u);  // per block: ln_1, c_attn, attn c_proj, ln_2, c_fc, mlp c_proj (w, b)
  for (int micro = 1; micro <= 2; ++micro) {  // the second pass accumulates: hooks fire again, once
    Tensor loss = forward_loss(*m, tokens(2, 16, 50, micro, 0), tokens(2, 16, 50, micro, 1), Mode::blocks);
    loss.backward();
    for (const Tensor& p : watched) {
      EXPECT_EQ(fired[p.impl_ptr()], micro) << p.name();
      EXPECT_TRUE(same_bits(seen[p.impl_ptr()], p.grad().to_float())) << "hook saw a non-final gradient";
    }
  }
  for (Tensor p : watched) p.clear_grad_ready_hooks();
}

TEST(Recompute, GeneratorRestoredAndGraphHoldsOneNodePerLayer) {
  auto m = make_gpt(3, 32, 4, 50, 16);
  Generator& gen = *m->generator();
  gen.set_state(kDropoutSeed, 0);
  Tensor h0 = m->layers()[0]->forward(tokens(2, 16, 50, 0, 0));  // (2, 16, 32)
  const uint64_t before = gen.offset();
  Tensor h1 = runtime::forward_recomputed(*m->layers()[1], h0, &gen);
  const uint64_t after = gen.offset();
  EXPECT_EQ(after - before, 2u * 2 * 16 * 32);  // two residual dropouts of (2, 16, 32)
  ASSERT_TRUE(h1.grad_fn());
  EXPECT_EQ(h1.grad_fn()->inputs.size(), 1u);
  EXPECT_TRUE(h1.grad_fn()->inputs[0].same(h0));
  // Backward through the one node: x's gradient returned, the generator left where it was.
  h1.backward(Tensor::ones({2, 16, 32}));
  EXPECT_EQ(gen.offset(), after);
  EXPECT_TRUE(m->layers()[1]->parameters()[0].grad().defined());
  // Grad mode off: the plain forward, nothing attached.
  NoGradGuard no_grad;
  Tensor h2 = runtime::forward_recomputed(*m->layers()[2], h0.detach(), &gen);
  EXPECT_FALSE(h2.requires_grad());
}

TEST(Recompute, HoldsFarFewerActivationBytes) {
  const int64_t B = 8, T = 128;
  auto m = make_gpt(6, 128, 4, 50, T);
  std::map<Mode, size_t> held;
  std::map<Mode, Result> res;
  for (Mode mode : {Mode::plain, Mode::blocks}) {
    m->zero_grad(true);
    m->generator()->set_state(kDropoutSeed, 0);
    Tensor ids = tokens(B, T, 50, 0, 0), targets = tokens(B, T, 50, 0, 1);
    const size_t base = cpu_bytes_in_use();
    Tensor loss = forward_loss(*m, ids, targets, mode);
    held[mode] = cpu_bytes_in_use() - base;  // the graph's saved tensors and the layer outputs
    Result r;
    r.losses.push_back(static_cast<float>(loss.item()));
    loss.backward();
    for (auto& [name, p] : m->named_parameters()) r.grads[name] = p.grad().to_float();
    r.gen_offset = m->generator()->offset();
    res[mode] = r;
  }
  std::cout << "activation bytes held after forward (GPT 6 layers, d 128, T 128, B 8): plain " << held[Mode::plain]
            << ", recompute " << held[Mode::blocks] << " (ratio "
            << static_cast<double>(held[Mode::blocks]) / static_cast<double>(held[Mode::plain]) << ")\n";
  expect_identical(res[Mode::plain], res[Mode::blocks]);
  // One block's input (B, T, C) f32 = 512 KiB; recompute keeps ~1 per block plus the embedding
  // and head graphs; the plain forward keeps every block's internals (qkv, attention, 4C MLP, ...).
  // Measured: plain 115757064, recompute 5459976 bytes (ratio 0.047); asserted: under 1/8.
  EXPECT_LT(held[Mode::blocks] * 8, held[Mode::plain]);
}

}  // namespace
}  // namespace st
