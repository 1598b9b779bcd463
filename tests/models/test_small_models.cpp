// The seed's SimpleTransformer (its default sizes: vocab 10000, d 256, 8 heads, 6 layers, post-LN,
// ReLU FFN 2048, dropout 0.1) and the MLP train through the same trainer with falling loss on a
// token file whose next token is a function of the current one; both also with SGD.
// Plus the layer-list contract every model keeps for pipelines: first layer ids → hidden, last
// hidden → logits, names unchanged by the split, costs for the partitioner.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "models/gpt.h"
#include "models/mlp_lm.h"
#include "models/simple_transformer.h"
#include "runtime/common/json_io.h"
#include "runtime/setup/model_registry.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/autograd.h"
#include "train_helpers.h"

namespace st {
namespace {

std::string pattern_tokens(const std::string& dir, int64_t vocab, int64_t n) {
  std::vector<uint16_t> toks;
  for (int64_t i = 0; i < n; ++i) toks.push_back(static_cast<uint16_t>(((i % 16) * 37 + 5) % vocab));
  std::string path = dir + "/pattern.bin";
  runtime::write_token_file(path, toks);
  return path;
}

std::vector<double> losses(const runtime::TrainConfig& cfg) {
  runtime::Trainer t(cfg);
  std::vector<double> out;
  while (t.step() < cfg.steps) out.push_back(t.train_step().loss);
  return out;
}

class SmallModels : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("small_models"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SmallModels, SimpleTransformerSeedSizesTrains) {
  runtime::TrainConfig cfg;
  cfg.model = "simple-transformer";
  cfg.vocab = 10000;
  cfg.d_model = 256;
  cfg.heads = 8;
  cfg.layers = 6;
  cfg.seq_len = 16;
  cfg.micro_batch = 4;
  cfg.data = pattern_tokens(dir_, 10000, 4096);
  cfg.steps = 6;
  cfg.lr = 1e-3;
  cfg.log_every = 0;
  {
    auto m = runtime::build_model(cfg);
    // embedding 10000·256 + 6 × (in_proj 256·768+768, out_proj 256·256+256, FFN 256·2048+2048+2048·256+256,
    // 2 LN 2·512) + head 256·10000+10000
    const int64_t layer = 256 * 768 + 768 + 256 * 256 + 256 + 256 * 2048 + 2048 + 2048 * 256 + 256 + 2 * 512;
    EXPECT_EQ(m->num_parameters(), 10000 * 256 + 6 * layer + 256 * 10000 + 10000);
    EXPECT_EQ(m->layers().size(), 8u);
  }
  auto l = losses(cfg);
  for (double x : l) std::cout << "simple-transformer loss " << x << "\n";
  EXPECT_NEAR(l.front(), std::log(10000.0), 1.0);  // starts near uniform
  EXPECT_LT(l.back(), l.front() - 1.0);
}

TEST_F(SmallModels, MlpTrainsWithAdamWAndSgd) {
  runtime::TrainConfig cfg;
  cfg.model = "mlp";
  cfg.vocab = 64;
  cfg.d_model = 32;
  cfg.layers = 2;
  cfg.seq_len = 16;
  cfg.micro_batch = 4;
  cfg.data = pattern_tokens(dir_, 64, 4096);
  cfg.steps = 40;
  cfg.lr = 3e-2;
  cfg.log_every = 0;
  auto a = losses(cfg);
  std::cout << "mlp adamw loss " << a.front() << " → " << a.back() << "\n";
  EXPECT_NEAR(a.front(), std::log(64.0), 0.1);
  EXPECT_LT(a.back(), 0.5 * a.front());
  cfg.optimizer = runtime::OptimizerKind::sgd;
  cfg.lr = 0.5;
  auto s = losses(cfg);
  std::cout << "mlp sgd loss " << s.front() << " → " << s.back() << "\n";
  EXPECT_LT(s.back(), 0.8 * s.front());
}

TEST_F(SmallModels, RunWritesMetricsValidationAndTrace) {
  runtime::TrainConfig cfg;
  cfg.model = "mlp";
  cfg.vocab = 64;
  cfg.d_model = 32;
  cfg.layers = 1;
  cfg.seq_len = 16;
  cfg.micro_batch = 4;
  cfg.data = pattern_tokens(dir_, 64, 4096);
  cfg.val_data = cfg.data;
  cfg.eval_every = 3;
  cfg.steps = 6;
  cfg.lr = 3e-2;
  cfg.log_every = 0;
  cfg.metrics = dir_ + "/out/metrics.jsonl";
  cfg.trace = dir_ + "/out/trace.json";
  runtime::Trainer t(cfg);
  t.run();
  auto lines = runtime::read_metrics(cfg.metrics);
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], static_cast<int>(i + 1));
    for (const char* k : {"loss", "grad_norm", "lr", "loss_scale", "skipped", "tokens_per_s", "step_ms", "mfu", "mem_bytes"})
      EXPECT_TRUE(lines[i].contains(k)) << k;
    EXPECT_EQ(lines[i].contains("val_loss"), (i + 1) % 3 == 0) << i;
    EXPECT_GT(lines[i]["mem_bytes"].get<int64_t>(), 0);
  }
  EXPECT_LT(lines[5]["val_loss"].get<double>(), lines[2]["val_loss"].get<double>());
  // the validation loss is the mean loss of the first batches: at step 3 it is close to the
  // training loss of step 4, which ran on the same weights (same distribution of tokens)
  EXPECT_NEAR(lines[2]["val_loss"].get<double>(), lines[3]["loss"].get<double>(), 0.05);
  auto trace = runtime::read_json_file(cfg.trace);
  int steps = 0, optimizer = 0;
  for (auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], 0);
    const std::string name = e["name"];
    steps += name.rfind("step ", 0) == 0;
    optimizer += name == "optimizer step";
  }
  EXPECT_EQ(steps, 6);  // one event per step, and inside each the optimizer's
  EXPECT_EQ(optimizer, 6);
}

void check_layer_contract(runtime::LanguageModel& m, int64_t vocab, int64_t C) {
  const auto& layers = m.layers();
  ASSERT_GE(layers.size(), 2u);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  NoGradGuard ng;
  m.eval();
  Tensor h = layers.front()->forward(ids);
  EXPECT_EQ(h.shape(), (Shape{2, 3, C}));
  for (size_t i = 1; i + 1 < layers.size(); ++i) {
    h = layers[i]->forward(h);
    EXPECT_EQ(h.shape(), (Shape{2, 3, C}));
  }
  Tensor logits = layers.back()->forward(h);
  EXPECT_EQ(logits.shape(), (Shape{2, 3, vocab}));
  // every parameter appears under the same full name in its layer
  std::map<std::string, const TensorImpl*> whole, split;
  for (auto& [n, p] : m.named_parameters()) whole[n] = p.impl_ptr();
  for (auto& l : layers) {
    for (auto& [n, p] : l->full_named_parameters()) split[n] = p.impl_ptr();
    auto c = l->cost(3);
    EXPECT_GT(c.param_bytes, 0.0);
    EXPECT_GE(c.flops_per_token, 0.0);
  }
  EXPECT_EQ(whole, split);
}

TEST(LayerContract, EveryModelIsALayerList) {
  models::GptConfig gc;
  gc.n_layer = 2, gc.n_embd = 16, gc.n_head = 2, gc.vocab_size = 40, gc.n_positions = 8;
  models::Gpt gpt(gc, std::make_shared<Generator>(0));
  gpt.init_weights(7);
  check_layer_contract(gpt, 40, 16);
  // the tied wte: one tensor, in the first and the last layer, one entry in the state dict
  EXPECT_EQ(gpt.tied_names(), std::vector<std::string>{"transformer.wte.weight"});
  auto find = [](const runtime::Layer& l, const std::string& n) {
    for (auto& [name, p] : l.full_named_parameters())
      if (name == n) return p;
    return Tensor();
  };
  Tensor in_first = find(*gpt.layers().front(), "transformer.wte.weight");
  Tensor in_last = find(*gpt.layers().back(), "transformer.wte.weight");
  ASSERT_TRUE(in_first.defined() && in_last.defined());
  EXPECT_TRUE(in_first.same(in_last));
  EXPECT_EQ(gpt.state_dict().size(), 4u + 12u * 2u);  // wte wpe ln_f.{w,b} + 12 per block
  // block cost: 2·(C·3C + C·C + C·4C + 4C·C) + 4·T·C per token
  EXPECT_DOUBLE_EQ(gpt.layers()[1]->cost(8).flops_per_token, 2.0 * 12 * 16 * 16 + 4.0 * 8 * 16);

  models::SimpleTransformerConfig sc;
  sc.vocab = 40, sc.d_model = 16, sc.heads = 2, sc.layers = 2, sc.ffn = 32;
  models::SimpleTransformer stm(sc, std::make_shared<Generator>(0));
  stm.init_weights(7);
  check_layer_contract(stm, 40, 16);
  EXPECT_NO_THROW(stm.parameter("transformer_encoder.layers.1.self_attn.in_proj.weight"));
  EXPECT_NO_THROW(stm.parameter("embedding.weight"));
  EXPECT_NO_THROW(stm.parameter("linear.weight"));

  models::MlpConfig mc;
  mc.vocab = 40, mc.d_model = 16, mc.layers = 1;
  models::MlpLm mlp(mc);
  mlp.init_weights(7);
  check_layer_contract(mlp, 40, 16);
  EXPECT_NO_THROW(mlp.parameter("hidden.0.weight"));
}

// Every family describes its layers from the config alone (what the pipeline partition is cut
// from, without building): the same names, full shapes and FLOPs as the built model's layers.
TEST(LayerContract, DescriptionIsTheBuiltModel) {
  runtime::TrainConfig cfg;
  cfg.layers = 3, cfg.d_model = 16, cfg.heads = 2, cfg.vocab = 40, cfg.seq_len = 8;
  for (const char* family : {"gpt", "simple-transformer", "mlp"}) {
    cfg.model = family;
    const nlohmann::json entry = runtime::model_entry(cfg);
    const runtime::ModelDescription d = runtime::describe_model(entry, 8);
    auto m = runtime::build_model(cfg);
    ASSERT_EQ(d.layers.size(), m->layers().size()) << family;
    EXPECT_EQ(d.vocab_size, 40);
    EXPECT_EQ(d.context_length, 8);
    for (size_t i = 0; i < d.layers.size(); ++i) {
      const runtime::Layer& l = *m->layers()[i];
      EXPECT_EQ(d.layers[i].scope, l.scope()) << family << " layer " << i;
      std::vector<std::pair<std::string, Shape>> built;
      for (auto& [n, p] : l.full_named_parameters()) built.emplace_back(n, p.shape());
      EXPECT_EQ(d.layers[i].params, built) << family << " layer " << i;
      EXPECT_DOUBLE_EQ(d.layers[i].flops_per_token, l.cost(8).flops_per_token) << family << " layer " << i;
      EXPECT_DOUBLE_EQ(d.layers[i].param_bytes(), l.cost(8).param_bytes) << family << " layer " << i;
    }
  }
}

// A pipeline stage builds only its layers, and they hold the numbers of the whole model's
// (init keyed by name): the head's own copy of the tied wte included. A stage of several ranges
// (interleaved chunks) holds each range's layers; holding both ends it builds the tied wte once.
TEST(LayerContract, ALayerRangeHoldsTheWholeModelsValues) {
  runtime::TrainConfig cfg;
  cfg.layers = 3, cfg.d_model = 16, cfg.heads = 2, cfg.vocab = 40, cfg.seq_len = 8, cfg.seed = 11;
  for (const char* family : {"gpt", "simple-transformer", "mlp"}) {
    cfg.model = family;
    auto whole = runtime::build_model(cfg);
    std::map<std::string, std::vector<double>> want;
    for (auto& [n, p] : whole->named_parameters()) want[n] = p.to_double();
    const int L = static_cast<int>(whole->layers().size());
    using Ranges = std::vector<runtime::LayerRange>;
    for (const Ranges& ranges : std::vector<Ranges>{{{0, 2}}, {{2, 3}}, {{3, L}}, {{L - 1, L}}, {{0, 1}, {L - 1, L}},
                                                    {{1, 2}, {3, L}}}) {
      auto part = runtime::build_model(cfg, ranges);
      EXPECT_EQ(part->ranges(), ranges);
      EXPECT_EQ(part->total_layers(), L);
      EXPECT_EQ(part->holds_first(), ranges.front().begin == 0);
      EXPECT_EQ(part->holds_last(), ranges.back().end == L);
      std::set<std::string> names;
      size_t i = 0;
      for (const runtime::LayerRange& r : ranges)
        for (int g = r.begin; g < r.end; ++g, ++i) {
          ASSERT_LT(i, part->layers().size());
          EXPECT_EQ(part->global_layer(i), g);
          EXPECT_EQ(part->layers()[i]->scope(), whole->layers()[static_cast<size_t>(g)]->scope());
          for (auto& [n, p] : whole->layers()[static_cast<size_t>(g)]->full_named_parameters()) names.insert(n);
        }
      EXPECT_EQ(part->layers().size(), i);
      std::set<std::string> got;
      for (auto& [n, p] : part->named_parameters()) {
        EXPECT_TRUE(got.insert(n).second) << family << " " << n << " listed twice";
        EXPECT_EQ(p.to_double(), want.at(n)) << family << " " << n;
      }
      EXPECT_EQ(got, names) << family;
    }
  }
  EXPECT_THROW(runtime::build_model(cfg, {{2, 2}}), ValueError);
  EXPECT_THROW(runtime::build_model(cfg, {{0, 9}}), ValueError);
  EXPECT_THROW(runtime::build_model(cfg, {{2, 3}, {0, 1}}), ValueError);  // out of order
  EXPECT_THROW(runtime::build_model(cfg, {{0, 2}, {1, 3}}), ValueError);  // overlapping
}

TEST(GptInit, FollowsHuggingFace) {
  models::GptConfig gc;
  gc.n_layer = 4, gc.n_embd = 64, gc.n_head = 4, gc.vocab_size = 512, gc.n_positions = 64;
  models::Gpt gpt(gc, std::make_shared<Generator>(0));
  gpt.init_weights(7);
  auto stdev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    auto v = t.to_double();
    for (double x : v) s += x, s2 += x * x;
    double n = static_cast<double>(v.size());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stdev(gpt.parameter("transformer.wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stdev(gpt.parameter("transformer.h.0.mlp.c_fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(stdev(gpt.parameter("transformer.h.0.attn.c_proj.weight")), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stdev(gpt.parameter("transformer.h.3.mlp.c_proj.weight")), 0.02 / std::sqrt(8.0), 0.0005);
  for (double x : gpt.parameter("transformer.h.1.attn.c_attn.bias").to_double()) ASSERT_EQ(x, 0.0);
  for (double x : gpt.parameter("transformer.ln_f.weight").to_double()) ASSERT_EQ(x, 1.0);
  for (double x : gpt.parameter("transformer.h.2.ln_1.bias").to_double()) ASSERT_EQ(x, 0.0);
  // deterministic in the seed
  models::Gpt again(gc, std::make_shared<Generator>(0));
  again.init_weights(7);
  EXPECT_EQ(again.parameter("transformer.wpe.weight").to_double(), gpt.parameter("transformer.wpe.weight").to_double());
}

}  // namespace
}  // namespace st
