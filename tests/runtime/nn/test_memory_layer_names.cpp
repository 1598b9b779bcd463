// The layer a forward allocates in, as --max-memory's error names it (tensor/memory_category.h,
// set by LanguageModel::forward_layers): every layer of a Llama — whose head (model.norm, lm_head)
// sits at the model's root and has no scope of its own — gets a name, the head its index: the
// error once read "in layer  forward" for it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "models/decoder/decoder.h"
#include "models/llama.h"
#include "tensor/memory_category.h"
#include "tensor/rng.h"

using namespace st;

namespace {

// Records the allocation layer each layer's forward runs under.
struct RecordLayer : runtime::LayerHook {
  std::vector<std::string> seen;
  Tensor forward(size_t, size_t, size_t, const Tensor& x, const std::function<Tensor(const Tensor&)>& run) override {
    seen.push_back(current_memory_layer());
    return run(x);
  }
};

}  // namespace

TEST(MemoryLayerNames, EveryLlamaLayerIsNamedTheRootHeadByItsIndex) {
  models::LlamaSizes s;
  s.layers = 2, s.d_model = 32, s.heads = 4, s.kv_heads = 2, s.ffn = 48, s.vocab = 50, s.context = 16;
  auto m = std::make_shared<models::DecoderModel>(models::llama_spec(models::llama_hf_config(s), "test"), nullptr,
                                                  std::make_shared<Generator>(1));
  m->init_weights(3);
  auto hook = std::make_shared<RecordLayer>();
  m->set_layer_hook(hook);
  Tensor ids = Tensor::zeros({1, 8}, DType::i64);
  m->forward(ids);
  ASSERT_EQ(hook->seen.size(), 4u) << "embedding, 2 blocks, head";
  EXPECT_EQ(hook->seen[0], "layer model forward");  // the embedding: model.embed_tokens
  EXPECT_EQ(hook->seen[1], "layer model.layers.0 forward");
  EXPECT_EQ(hook->seen[2], "layer model.layers.1 forward");
  EXPECT_EQ(hook->seen[3], "layer #3 forward") << "the head, at the model's root";
}
