// Measures each layer's forward + backward time on this rank's device for --partition profile,
// without ever holding more than one layer: layer i is built alone (a one-layer range, by the
// caller's builder), a zero micro-batch (B, T) flows through it once to warm up and once timed,
// in eval mode (no dropout draws, so the run's random stream is untouched), and its output is
// the next layer's input. The times are averaged over `world` so that every rank computes the
// same split (collective over world; with tp every rank of a tp group builds the same layer at
// the same time, so the layers' own collectives pair up).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

// The model's layer `layer` alone, on the device the profile runs on (weights need not be filled).
using LayerBuilder = std::function<std::shared_ptr<LanguageModel>(int layer)>;

std::vector<double> profile_layers(const LayerBuilder& build, int layers, int64_t B, int64_t T, Device device,
                                   comm::Communicator* world);

}  // namespace st::runtime
