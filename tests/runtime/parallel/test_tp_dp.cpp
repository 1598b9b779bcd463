// Tensor parallel composed with data parallel: a dp × tp grid (tp 2 on even worlds, else 1),
// each DP replica runs its own 2 sequences through a TpGpt on its tp group, the GradReducer sums
// the local shards' gradients over the dp group during backward; the shards gathered over tp then
// equal the single-process GPT's gradient of the mean loss over all 2·dp sequences (1e-5
// relative), and the loss averaged over replicas equals the one-process loss.
#include <gtest/gtest.h>

#include "comm/process_grid.h"
#include "models/gpt.h"
#include "runtime/parallel/tp_shard.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "runtime/parallel/grad_reducer.h"
#include "tests/support/tp_test_util.h"

using namespace st;
using namespace st::runtime;
using st::tptest::close_rel;

namespace {

// ids (n, T): sequence j is the same on every rank
Tensor sequences(int64_t first, int64_t n, int64_t T, int64_t V, int64_t salt) {
  std::vector<int64_t> v;
  for (int64_t j = first; j < first + n; ++j)
    for (int64_t t = 0; t < T; ++t) v.push_back((j * 31 + t * 7 + salt * 3 + (j * t) % 5) % V);
  return Tensor::from_vector(v, {n, T});
}

}  // namespace

TEST(TpDp, GridGradientsEqualOneProcessOnTheGlobalBatch) {
  auto world = tptest::world();
  const int tp = world->size() % 2 == 0 ? 2 : 1;
  comm::ProcessGrid grid(world, 0, tp, 1);
  const int dp = grid.layout().dp, replica = grid.coord().dp;
  const int64_t B = 2, T = 8;
  models::GptConfig c;
  c.n_layer = 2;
  c.n_embd = 24;
  c.n_head = 6;
  c.vocab_size = 50;
  c.n_positions = 16;
  auto gen = std::make_shared<Generator>(1);
  models::Gpt full(c, gen);
  full.init_weights(17);
  Tensor ids = sequences(0, B * dp, T, c.vocab_size, 1), tgt = sequences(0, B * dp, T, c.vocab_size, 2);
  Tensor loss_r = ops::cross_entropy(full.forward(ids), tgt);
  loss_r.backward();

  models::Gpt tpm(c, gen, {}, grid.tp_group());
  tpm.init_weights(17);
  GradReducer reducer(tpm.named_parameters(), grid.dp_group());
  reducer.zero_grad();
  reducer.set_sync(true);
  Tensor my_ids = ids.narrow(0, replica * B, B).contiguous(), my_tgt = tgt.narrow(0, replica * B, B).contiguous();
  Tensor loss = tpm.loss(tpm.forward(my_ids), my_tgt);  // mean over this replica's sequences
  ops::scale(loss, 1.0 / dp).backward();                // the reducer's SUM makes the global mean
  reducer.finalize();
  if (dp > 1) {
    EXPECT_GE(reducer.stats().buckets_launched, 1);  // a group of one has nothing to send
  }

  Tensor mean_loss = Tensor::from_vector(std::vector<float>{static_cast<float>(loss.item() / dp)}, {1});
  const double global = dp > 1 ? tp_all_reduce_sum(mean_loss, *grid.dp_group()).item() : mean_loss.item();
  EXPECT_NEAR(global, loss_r.item(), 1e-5 * loss_r.item());

  NamedTensors grads;
  for (auto& [n, p] : tpm.named_parameters()) grads.emplace_back(n, p.grad());
  NamedTensors gathered = tp > 1 ? gather_state_dict(grads, tpm.shard_rule(), *grid.tp_group()) : grads;
  std::map<std::string, Tensor> ref;
  for (auto& [n, p] : full.named_parameters()) ref[n] = p.grad();
  ASSERT_EQ(gathered.size(), ref.size());
  for (auto& [n, g] : gathered) EXPECT_TRUE(close_rel(g, ref.at(n), 1e-5)) << n;
}
