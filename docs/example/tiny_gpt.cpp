// Uses shardtrain as a library: builds a small GPT through the model registry and fits one
// repeated sentence with AdamW for a few steps. Exits 0 when the loss fell by more than half.
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cross_entropy.h"
#include "runtime/setup/model_registry.h"
#include "runtime/optim/optimizer.h"
#include "runtime/setup/train_config.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

int main() {
  using namespace st;
  runtime::TrainConfig cfg;  // the same options `shardtrain train` takes
  cfg.model = "gpt";
  cfg.layers = 2;
  cfg.d_model = 32;
  cfg.heads = 2;
  cfg.vocab = 256;
  cfg.seq_len = 16;
  auto model = runtime::build_model(cfg);  // weights drawn by name from cfg.seed

  // Bytes of a repeated sentence: inputs x (1, T), targets y (1, T) shifted by one.
  const std::string text = "hello shardtrain! hello shardtrain! ";
  std::vector<int64_t> x, y;
  for (int64_t t = 0; t < cfg.seq_len; ++t) {
    x.push_back(static_cast<unsigned char>(text[t]));
    y.push_back(static_cast<unsigned char>(text[t + 1]));
  }
  Tensor inputs = Tensor::from_vector(x, {1, cfg.seq_len});
  Tensor targets = Tensor::from_vector(y, {1, cfg.seq_len});

  runtime::AdamW opt(model->named_parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 1; step <= 30; ++step) {
    Tensor loss = ops::cross_entropy(model->forward(inputs), targets);  // logits (1, T, V) → ()
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model->parameters()) grads.push_back(p.grad());
    opt.step(grads, 1e-2);
    model->zero_grad();
    last = loss.item();
    if (step == 1) first = last;
  }
  std::printf("%s: %lld parameters, loss %.4f -> %.4f\n", model->family().c_str(),
              static_cast<long long>(model->num_parameters()), first, last);
  return last < 0.5 * first ? 0 : 1;
}
