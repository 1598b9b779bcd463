#include "runtime/pipeline/layer_profile.h"

#include <chrono>

#include "tensor/autograd.h"

namespace st::runtime {

std::vector<double> profile_layers(LanguageModel& model, int64_t B, int64_t T, Device device,
                                   comm::Communicator* world) {
  using Clock = std::chrono::steady_clock;
  const bool was_training = model.is_training();
  model.eval();
  const auto& layers = model.layers();
  std::vector<double> ms(layers.size(), 0.0);
  for (int pass = 0; pass < 2; ++pass) {
    Tensor x = Tensor::zeros({B, T}, DType::i64, device);
    for (size_t i = 0; i < layers.size(); ++i) {
      Tensor in = x.detach();
      if (is_floating(in.dtype())) in.requires_grad_(true);
      auto t0 = Clock::now();
      Tensor y = layers[i]->forward(in);
      y.backward(Tensor::ones(y.shape(), y.dtype(), y.device()));
      if (device == Device::cuda) y.detach().flatten().narrow(0, 0, 1).to(Device::cpu);  // waits for the device
      double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (pass == 1) ms[i] = dt;
      x = y.detach();
    }
    model.zero_grad(/*set_to_none=*/true);
  }
  model.train(was_training);
  if (world && world->size() > 1) {
    std::vector<float> v(ms.begin(), ms.end());
    Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
    world->all_reduce(t, comm::ReduceOp::avg)->wait();
    auto back = t.to_double();
    for (size_t i = 0; i < ms.size(); ++i) ms[i] = back[i];
  }
  return ms;
}

}  // namespace st::runtime
