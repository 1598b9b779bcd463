// Whole parameters (ZeRO 0-2) and ZeRO-3's pieces behind one seam (see the header).
#include "runtime/parallel/parameter_sharding.h"

#include <algorithm>

namespace st::runtime {

int zero_stage_in_effect(int64_t requested, int64_t dp) { return dp > 1 ? static_cast<int>(requested) : 0; }

NamedTensors WholeParameters::start(LanguageModel& model, NamedTensors mine, const ParameterSource& src, Device) {
  if (src.whole) {
    src.whole(model);
    check_finite(model.named_parameters(), src.where);
  }
  return mine;
}

void WholeParameters::load_optimizer_state(Optimizer& opt, const PartSource& state) {
  check_parts(state, opt.state_dict(), /*strict=*/false);  // this rank's keys (its stage, shards, ZeRO run)
  opt.load_state([&](const std::string& key, const Tensor& dst) { Tensor(dst).copy_(read_part(state, key, dst.shape())); });
}

NamedTensors Zero3Parameters::start(LanguageModel&, NamedTensors, const ParameterSource& src, Device device) {
  // each piece from the checkpoint, the pretrained directory or the keyed init: only its elements
  // are read or drawn (runtime/parallel/zero3.h, "Start")
  NamedTensors pieces = zero_->shard(
      [&](const std::string& name, Tensor& piece, int64_t first) {
        src.window(name, zero_->local_shape(name), piece, first);
      },
      device);
  if (!src.where.empty()) check_finite(pieces, src.where);
  return pieces;
}

void Zero3Parameters::load_optimizer_state(Optimizer& opt, const PartSource& state) {
  // of each key only this rank's piece is read
  opt.load_state([&](const std::string& key, const Tensor& dst) {
    check_dtype(state, key, dst.dtype());
    if (key == "step") return void(Tensor(dst).copy_(read_part(state, key, dst.shape())));
    const std::string name = key.substr(key.find('.') + 1);
    const Zero3::PieceRange r = zero_->piece_range(name);
    Tensor(dst).copy_(read_part_window(state, key, zero_->local_shape(name), r.first, r.len).view(dst.shape()));
  });
}

NamedTensors Zero3Parameters::full_optimizer_state(const NamedTensors& state) {
  // every tensor assembled from its pieces, kept by the rank holding its start; slot by slot
  NamedTensors full{state.front()};  // "step"
  std::vector<std::string> slots;    // "exp_avg", "exp_avg_sq", "master": the same on every rank
  for (const auto& [key, t] : state)
    if (key != "step" && std::find(slots.begin(), slots.end(), key.substr(0, key.find('.'))) == slots.end())
      slots.push_back(key.substr(0, key.find('.')));
  for (const std::string& slot : slots) {
    NamedTensors pieces;
    for (const auto& [key, t] : state)
      if (key.compare(0, slot.size() + 1, slot + ".") == 0) pieces.emplace_back(key.substr(slot.size() + 1), t);
    for (auto& [name, t] : zero_->gather_full(pieces)) full.emplace_back(slot + "." + name, t);
  }
  return full;
}

}  // namespace st::runtime
