#include "runtime/pipeline/layer_profile.h"

#include <chrono>

#include "tensor/autograd.h"

namespace st::runtime {

std::vector<double> profile_layers(const LayerBuilder& build, int layers, int64_t B, int64_t T, Device device,
                                   comm::Communicator* world) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms(static_cast<size_t>(layers), 0.0);
  Tensor x = Tensor::zeros({B, T}, DType::i64, device);
  for (int i = 0; i < layers; ++i) {
    std::shared_ptr<LanguageModel> m = build(i);
    ST_CHECK(m && m->layers().size() == 1, ValueError, "profile: the builder of layer " << i << " gave no single layer");
    m->eval();
    Layer& layer = *m->layers().front();
    Tensor y;
    for (int pass = 0; pass < 2; ++pass) {  // warm-up, then timed
      Tensor in = x.detach();
      if (is_floating(in.dtype())) in.requires_grad_(true);
      auto t0 = Clock::now();
      y = layer.forward(in);
      y.backward(Tensor::ones(y.shape(), y.dtype(), y.device()));
      if (device == Device::cuda) y.detach().flatten().narrow(0, 0, 1).to(Device::cpu);  // waits for the device
      if (pass == 1) ms[static_cast<size_t>(i)] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    x = y.detach();
  }
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
