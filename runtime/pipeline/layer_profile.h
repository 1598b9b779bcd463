// Measures each layer's forward + backward time on this rank's device for --partition profile:
// a zero micro-batch (B, T) flows through the layers once to warm up and once timed, in eval
// mode (no dropout draws, so the run's random stream is untouched). The times are averaged over
// `world` so that every rank computes the same split.
#pragma once
#include <vector>

#include "comm/communicator.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

std::vector<double> profile_layers(LanguageModel& model, int64_t B, int64_t T, Device device,
                                   comm::Communicator* world);

}  // namespace st::runtime
