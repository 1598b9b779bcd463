// --fp8-scaling delayed in the step and the checkpoint (see the header).
#include "runtime/train/fp8_delayed.h"

#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// the three scalings of a GEMM, with their key suffixes
std::array<std::pair<const char*, ops::Fp8Scaling*>, 3> parts(ops::Fp8LinearState& s) {
  return {{{"x", &s.x}, {"w", &s.w}, {"grad", &s.grad}}};
}

}  // namespace

bool fp8_delayed(const LanguageModel::NamedFp8States& states) {
  for (const auto& [name, s] : states)
    if (s->x.options.mode == ops::Fp8ScaleMode::delayed) return true;
  return false;
}

Fp8DelayedScaling::Fp8DelayedScaling(LanguageModel::NamedFp8States states, std::shared_ptr<comm::Communicator> group)
    : states_(std::move(states)), group_(std::move(group)) {
  for (auto& [name, s] : states_)
    for (auto& [suffix, sc] : parts(*s)) scalings_.push_back(sc);
  if (group_ && group_->size() <= 1) group_.reset();
  if (group_ && !scalings_.empty())
    amax_ = Tensor::zeros({static_cast<int64_t>(scalings_.size())}, DType::f32, scalings_.front()->state.device());
}

void Fp8DelayedScaling::update() {
  NoGradGuard ng;
  if (group_ && amax_.defined()) {
    // (3·L) amaxes → one all-reduce(max) over the stage's ranks → back into each state. Max is
    // exact and order-free, so every rank gets the same bits; the amaxes are ≥ 0 floats (a NaN one
    // comes from a step the trainer skips: whichever the reduction keeps, every rank keeps it).
    // (A stage without FP8 GEMMs has no buffer: every rank of its group alike, so none reduces.)
    for (size_t i = 0; i < scalings_.size(); ++i) amax_.narrow(0, i, 1).copy_(scalings_[i]->amax());
    group_->all_reduce(amax_, comm::ReduceOp::max)->wait();
    for (size_t i = 0; i < scalings_.size(); ++i) scalings_[i]->amax().copy_(amax_.narrow(0, i, 1));
  }
  ops::fp8_scaling_update(scalings_);  // one launch on CUDA
}

Fp8StateKeeper::Fp8StateKeeper(const LanguageModel::NamedFp8States& states) {
  if (!fp8_delayed(states)) return;
  NoGradGuard ng;
  for (const auto& [name, s] : states)
    for (auto& [suffix, sc] : parts(*s)) saved_.emplace_back(sc->state, sc->state.clone());
}

Fp8StateKeeper::~Fp8StateKeeper() {
  NoGradGuard ng;
  try {
    for (auto& [state, copy] : saved_) state.copy_(copy);
  } catch (const std::exception&) {
    // a device failure: the next operation on the device reports it
  }
}

NamedTensors fp8_checkpoint_state(const LanguageModel::NamedFp8States& states) {
  NamedTensors out;
  if (!fp8_delayed(states)) return out;
  for (const auto& [name, s] : states)
    for (auto& [suffix, sc] : parts(*s)) out.emplace_back(kFp8KeyPrefix + name + "." + suffix, sc->state);
  return out;
}

std::string load_fp8_checkpoint_state(const LanguageModel::NamedFp8States& states, const SafetensorsStore& store,
                                      const std::string& where) {
  if (!fp8_delayed(states)) return "";
  int64_t missing = 0, total = 0;
  NoGradGuard ng;
  for (const auto& [name, s] : states)
    for (auto& [suffix, sc] : parts(*s)) {
      ++total;
      const std::string key = kFp8KeyPrefix + name + "." + suffix;
      if (!store.contains(key)) {
        ++missing;
        continue;
      }
      const Tensor t = store.read(key);
      ST_CHECK(t.dtype() == DType::f32 && t.dim() == 1 && t.numel() == sc->state.numel(), ValueError,
               "--resume: " << where << " holds " << key << " as " << t.describe() << ", this run's is "
                            << sc->state.describe() << " (an amax history of " << t.numel() - ops::kFp8History
                            << "; this run has --fp8-amax-history " << sc->options.history << ")");
      sc->state.copy_(t.to(sc->state.device()));
    }
  if (missing == 0) return "";
  return "--fp8-scaling delayed: " + where + " holds no amax history for " + std::to_string(missing) + " of the " +
         std::to_string(total) + " FP8 scalings (a checkpoint of a current-scaling run); they start fresh (scale 1, "
         "empty history) and follow the data from the next step";
}

}  // namespace st::runtime
