// Hugging Face GPT-2 interop: export → import round trip (bit-exact, the fixture's names and
// shapes, no lm_head, {"format": "pt"}); the variants transformers writes (GPT2Model's bare names,
// an explicit tied lm_head, legacy mask buffers) load; unsupported configs and bad weights fail
// with errors naming the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "models/hf_gpt2.h"
#include "runtime/common/json_io.h"
#include "runtime/setup/model_registry.h"
#include "runtime/io/safetensors.h"
#include "tests/support/sharded_fixture.h"
#include "train_helpers.h"

namespace st {
namespace {

using testing::fixture_dir;

class HfGpt2 : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("hf_gpt2"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A copy of the fixture with `edit` applied to config.json and `tensors` as the weights.
  std::string variant(const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                      const runtime::NamedTensors& tensors) {
    std::string d = dir_ + "/" + name;
    std::filesystem::create_directories(d);
    auto cfg = runtime::read_json_file(fixture_dir() + "/config.json");
    edit(cfg);
    runtime::write_json_file(d + "/config.json", cfg);
    runtime::save_safetensors(d + "/model.safetensors", tensors, {{"format", "pt"}});
    return d;
  }
  runtime::NamedTensors fixture_tensors() { return runtime::read_safetensors(fixture_dir() + "/model.safetensors").tensors; }
  std::string load_error(const std::string& d) {
    try {
      models::load_hf_gpt2(d, std::make_shared<Generator>(0));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(HfGpt2, ExportImportRoundTripIsBitExactWithTheFixtureLayout) {
  auto model = models::load_hf_gpt2(fixture_dir(), std::make_shared<Generator>(0));
  models::GptConfig c = model->config();
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.n_positions, 32);
  // perturb so the round trip is not just the fixture
  models::Gpt fresh(c, std::make_shared<Generator>(0));
  fresh.init_weights(1);
  models::save_hf_gpt2(fresh, dir_ + "/out");
  auto file = runtime::read_safetensors(dir_ + "/out/model.safetensors");
  auto ref = runtime::read_safetensors(fixture_dir() + "/model.safetensors");
  ASSERT_EQ(file.tensors.size(), ref.tensors.size());
  for (size_t i = 0; i < ref.tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, ref.tensors[i].first);  // same names, same (sorted) order
    EXPECT_EQ(file.tensors[i].second.shape(), ref.tensors[i].second.shape());
    EXPECT_EQ(file.tensors[i].second.dtype(), DType::f32);
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  auto cfg = runtime::read_json_file(dir_ + "/out/config.json");
  EXPECT_EQ(cfg.at("model_type"), "gpt2");
  EXPECT_EQ(cfg.at("activation_function"), "gelu_new");
  EXPECT_EQ(cfg.at("n_layer"), 2);
  EXPECT_EQ(cfg.at("tie_word_embeddings"), true);
  auto back = models::load_hf_gpt2(dir_ + "/out", std::make_shared<Generator>(0));
  auto a = fresh.state_dict(), b = back->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_double(), b[i].second.to_double()) << a[i].first;
}

TEST_F(HfGpt2, AcceptsBareNamesTiedLmHeadAndLegacyBuffers) {
  runtime::NamedTensors bare, extra = fixture_tensors();
  for (auto& [n, t] : fixture_tensors()) bare.emplace_back(n.substr(std::string("transformer.").size()), t);
  Tensor wte;
  for (auto& [n, t] : extra)
    if (n == "transformer.wte.weight") wte = t;
  extra.emplace_back("lm_head.weight", wte.clone());
  extra.emplace_back("transformer.h.0.attn.bias", Tensor::ones({1, 1, 32, 32}));
  auto noop = [](nlohmann::json&) {};
  auto ref = models::load_hf_gpt2(fixture_dir(), std::make_shared<Generator>(0))->state_dict();
  for (const char* name : {"bare", "extra"}) {
    auto m = models::load_hf_gpt2(variant(name, noop, std::string(name) == "bare" ? bare : extra),
                                  std::make_shared<Generator>(0));
    auto sd = m->state_dict();
    for (size_t i = 0; i < sd.size(); ++i) EXPECT_EQ(sd[i].second.to_double(), ref[i].second.to_double()) << name;
  }
}

TEST_F(HfGpt2, RejectsWhatOurGptDoesNotImplement) {
  auto t = fixture_tensors();
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"relu", [](nlohmann::json& j) { j["activation_function"] = "relu"; }, "activation_function \"relu\""},
      {"inner", [](nlohmann::json& j) { j["n_inner"] = 128; }, "n_inner 128"},
      {"type", [](nlohmann::json& j) { j["model_type"] = "llama"; }, "model_type \"llama\""},
      {"noembd", [](nlohmann::json& j) { j.erase("n_embd"); }, "\"n_embd\" is missing"},
      {"untied", [](nlohmann::json& j) { j["tie_word_embeddings"] = false; }, "tie_word_embeddings"},
      {"scale", [](nlohmann::json& j) { j["scale_attn_by_inverse_layer_idx"] = true; }, "scale_attn_by_inverse_layer_idx"},
      {"cross", [](nlohmann::json& j) { j["add_cross_attention"] = true; }, "add_cross_attention"},
      {"heads", [](nlohmann::json& j) { j["n_head"] = 3; }, "not divisible"},
  };
  for (auto& c : cases) {
    std::string e = load_error(variant(c.name, c.edit, t));
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << c.name << ": " << e;
  }
}

TEST_F(HfGpt2, RejectsBadWeightsNamingTheKey) {
  auto noop = [](nlohmann::json&) {};
  auto t = fixture_tensors();
  // an lm_head that differs from wte
  auto untied = t;
  untied.emplace_back("lm_head.weight", Tensor::zeros({256, 64}));
  EXPECT_NE(load_error(variant("lm", noop, untied)).find("lm_head.weight differs"), std::string::npos);
  // a wrong shape
  auto shaped = t;
  for (auto& [n, x] : shaped)
    if (n == "transformer.h.1.mlp.c_fc.weight") x = Tensor::zeros({256, 64});  // transposed layout
  std::string e = load_error(variant("shape", noop, shaped));
  EXPECT_NE(e.find("transformer.h.1.mlp.c_fc.weight"), std::string::npos) << e;
  // a missing tensor
  runtime::NamedTensors missing;
  for (auto& [n, x] : t)
    if (n != "transformer.ln_f.bias") missing.emplace_back(n, x);
  e = load_error(variant("missing", noop, missing));
  EXPECT_NE(e.find("missing key 'transformer.ln_f.bias'"), std::string::npos) << e;
  // a directory that is not there
  EXPECT_NE(load_error(dir_ + "/nowhere").find("not a directory"), std::string::npos);
}

// Hugging Face's sharded layout (model.safetensors.index.json + 3 files) loads the same model.
TEST_F(HfGpt2, ShardedCopyLoadsTheSame) {
  testing::write_sharded_fixture(fixture_dir(), dir_ + "/sharded", 3);
  ASSERT_FALSE(std::filesystem::exists(dir_ + "/sharded/model.safetensors"));
  auto ref = models::load_hf_gpt2(fixture_dir(), std::make_shared<Generator>(0))->state_dict();
  auto got = models::load_hf_gpt2(dir_ + "/sharded", std::make_shared<Generator>(0))->state_dict();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(got[i].first, ref[i].first);
    EXPECT_EQ(got[i].second.to_double(), ref[i].second.to_double()) << ref[i].first;
  }
}

TEST_F(HfGpt2, InitFromIsForTheGptOnly) {
  runtime::TrainConfig cfg = testing::reference_config();
  auto m = runtime::build_model(cfg);  // --init-from: the fixture's sizes, whatever the flags say
  EXPECT_EQ(m->family(), "gpt");
  EXPECT_EQ(m->context_length(), 32);
  cfg.model = "mlp";
  try {
    runtime::build_model(cfg);
    FAIL() << "an MLP was initialised from a GPT-2 directory";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--model mlp"), std::string::npos) << e.what();
  }
  cfg.model = "transformer-xl";
  cfg.init_from.clear();
  try {
    runtime::build_model(cfg);
    FAIL();
  } catch (const ValueError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("unknown model 'transformer-xl'"), std::string::npos) << w;
    for (const char* f : {"gpt", "mlp", "simple-transformer"}) EXPECT_NE(w.find(f), std::string::npos) << w;
  }
}

}  // namespace
}  // namespace st
