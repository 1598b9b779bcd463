// The HF GPT-2 fixture (tests/fixtures/hf_gpt2_tiny: 2 layers, 4 heads, C 64, V 256) reproduced
// under tensor parallelism: the fixture's weights loaded by name into a TpGpt (tp = the world at
// np 1, 2, 4), the first batch's logits against transformers' to 1e-5 relative, then 5 AdamW
// steps (lr 1e-3, betas 0.9/0.95, eps 1e-8, wd 0.1, clip 1.0, B 4, T 32) on the local shards with
// the vocab-parallel loss and the TP global grad norm: loss and grad norm of every step against
// transformers' to 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>

#include "models/gpt.h"
#include "runtime/parallel/tp_shard.h"
#include "models/hf_gpt2.h"
#include "runtime/optim/grad_clip.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/optim/optimizer.h"
#include "runtime/data/token_data.h"
#include "tensor/autograd.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::tptest::close_rel;

namespace {

const std::string kDir = ST_FIXTURE_DIR;

std::shared_ptr<models::Gpt> load_tp_model() {
  auto full = models::load_hf_gpt2(kDir, std::make_shared<Generator>(0));
  auto tpm = std::make_shared<models::Gpt>(full->config(), std::make_shared<Generator>(0), std::vector<runtime::LayerRange>{}, tptest::world());
  const NamedTensors sd = full->state_dict();
  tpm->load_full_state_dict({sd.begin(), sd.end()});
  return tpm;
}

}  // namespace

TEST(TpHfFixture, FirstBatchLogitsMatchTransformers) {
  auto tpm = load_tp_model();
  tpm->eval();
  TokenData data(kDir + "/tokens.bin");
  TokenBatch b = data.read(0, 4, 32);
  NoGradGuard ng;
  Tensor logits = tpm->gather_logits(tpm->forward(b.inputs));  // (4, 32, 256)
  Tensor ref = load_safetensors(kDir + "/logits0.safetensors").at("logits");
  EXPECT_TRUE(close_rel(logits, ref, 1e-5));
}

TEST(TpHfFixture, FiveAdamWStepsMatchTransformers) {
  auto j = read_json_file(kDir + "/reference.json");
  auto tpm = load_tp_model();
  tpm->train(true);  // the fixture's dropout probabilities are 0
  const TpGroup tp = tptest::world();
  AdamWOptions o;
  o.lr = 1e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  AdamW opt(tpm->named_parameters(), o);
  TokenData data(kDir + "/tokens.bin");
  const auto& steps = j.at("steps");
  ASSERT_EQ(steps.size(), 5u);
  for (int64_t s = 0; s < 5; ++s) {
    tpm->zero_grad();
    TokenBatch b = data.sequences(s, 4, 0, 4, 32);
    Tensor loss = tpm->loss(tpm->forward(b.inputs), b.targets);
    loss.backward();
    NamedTensors grads;
    std::vector<Tensor> g;
    for (auto& [n, p] : opt.params()) {
      grads.emplace_back(n, p.grad());
      g.push_back(p.grad());
    }
    Tensor share = Tensor::from_vector(
        std::vector<float>{static_cast<float>(tp_local_sum_squares(grads, tpm->shard_rule(), tp_rank(tp)))}, {1});
    const double norm = std::sqrt(tp_size(tp) > 1 ? tp_all_reduce_sum(share, *tp).item() : share.item());
    clip_by_global_norm(g, norm, 1.0);
    opt.step(g, 1e-3);
    const double want_loss = steps[s].at("loss").get<double>(), want_norm = steps[s].at("grad_norm").get<double>();
    EXPECT_NEAR(loss.item(), want_loss, 1e-5 * want_loss) << "step " << s + 1;
    EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm) << "step " << s + 1;
  }
}
