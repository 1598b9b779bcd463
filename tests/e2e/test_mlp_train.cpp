// End to end: a 2-layer MLP (linear → GELU → linear → cross-entropy) on a fixed random batch,
// trained with AdamW on the CPU. Measured: loss 1.84 → 0.42 after 10 steps,
// → 0.0055 after 40 (lr 1e-2). Asserted, conservatively: ≤ 0.1× the initial loss after 40 steps,
// and lower every 10 steps.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tests/e2e/train_util.h"

using namespace st;
using namespace st::test;

TEST(E2E, TwoLayerMlpLossFalls) {
  const int64_t N = 32, C_in = 16, H = 64, K = 5;
  Generator gen(2024);
  Tensor x = Tensor::empty({N, C_in});  // (N, C_in)
  fill_normal(x, gen);
  std::vector<int64_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = (i * 7 + 3) % K;
  Tensor targets = Tensor::from_vector(t, {N});  // (N)

  Param w1 = make_param({C_in, H}, 0.2f, gen), b1 = make_param({H}, 0.f, gen);
  Param w2 = make_param({H, K}, 0.2f, gen), b2 = make_param({K}, 0.f, gen);
  std::vector<Param*> params = {&w1, &b1, &w2, &b2};
  ops::AdamWParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};

  std::vector<double> losses;
  for (int64_t step = 1; step <= 40; ++step) {
    Tensor h = ops::gelu(ops::linear(x, w1.w, b1.w));        // (N, H)
    Tensor loss = ops::cross_entropy(ops::linear(h, w2.w, b2.w), targets);  // ()
    losses.push_back(loss.item());
    loss.backward();
    adamw_all(params, hp, step);
  }
  std::printf("mlp loss: first %.4f, after 10 %.4f, 20 %.4f, last %.4f\n", losses[0], losses[10], losses[20],
              losses.back());
  EXPECT_NEAR(losses[0], std::log(5.0), 0.5);  // near-uniform start
  for (size_t i = 10; i < losses.size(); i += 10) EXPECT_LT(losses[i], losses[i - 10]);
  EXPECT_LE(losses.back(), 0.1 * losses[0]);
}
