// Activation recompute: forward under no-grad, one node whose backward rebuilds and runs the
// layer's graph (design and contract in runtime/nn/recompute.h).
#include "runtime/nn/recompute.h"

#include <optional>
#include <vector>

#include "runtime/nn/dropout_context.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// Rewinds `gen` to (seed, offset) for its scope and puts back the state it had before, even when
// the recompute throws.
class GeneratorRewind {
 public:
  GeneratorRewind(Generator* gen, uint64_t seed, uint64_t offset) : gen_(gen) {
    if (!gen_) return;
    seed_ = gen_->seed();
    offset_ = gen_->offset();
    gen_->set_state(seed, offset);
  }
  ~GeneratorRewind() {
    if (gen_) gen_->set_state(seed_, offset_);
  }
  GeneratorRewind(const GeneratorRewind&) = delete;
  GeneratorRewind& operator=(const GeneratorRewind&) = delete;

 private:
  Generator* gen_;
  uint64_t seed_ = 0, offset_ = 0;
};

// Sets the layer's train/eval flag for its scope, then puts the previous one back.
class TrainModeScope {
 public:
  TrainModeScope(Layer& layer, bool training) : layer_(layer), prev_(layer.is_training()) {
    if (prev_ != training) layer_.train(training);
  }
  ~TrainModeScope() {
    if (layer_.is_training() != prev_) layer_.train(prev_);
  }
  TrainModeScope(const TrainModeScope&) = delete;
  TrainModeScope& operator=(const TrainModeScope&) = delete;

 private:
  Layer& layer_;
  bool prev_;
};

bool any_parameter_requires_grad(const Layer& layer) {
  for (const Tensor& p : layer.parameters())
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

Tensor forward_recomputed(Layer& layer, const Tensor& x, Generator* gen) {
  if (!grad_enabled()) return layer.forward(x);
  const bool x_needs_grad = x.requires_grad() && is_floating(x.dtype());
  const uint64_t seed = gen ? gen->seed() : 0;
  const uint64_t offset_before = gen ? gen->offset() : 0;
  const bool training = layer.is_training();
  // the step's dropout context (if any), re-opened for the recomputed forward so that its masks
  // are the original's (runtime/nn/dropout_context.h)
  std::optional<DropoutContext> ctx;
  if (const DropoutContext* c = dropout_context()) ctx = *c;

  Tensor out;
  {
    NoGradGuard no_grad;
    // a new TensorImpl over the result's storage, so attaching the node below can never touch
    // x or a parameter a layer might return as is.
    out = layer.forward(x).detach();  // (B, T, C) or logits (B, T, V); no graph kept
  }
  const uint64_t offset_after = gen ? gen->offset() : 0;
  if (!x_needs_grad && !any_parameter_requires_grad(layer)) return out;

  Tensor saved = x.detach();  // x's data only: no reference to the graph behind x
  Layer* lp = &layer;
  // grad_out: the output's shape → {grad of x} (x's shape; undefined when x needs none).
  attach_grad_fn(out, "recompute(" + layer.scope() + ")", {x},
                   [lp, saved, gen, seed, offset_before, offset_after, training, x_needs_grad, ctx](const Tensor& grad_out) {
                     EnableGradGuard grad_on;  // the engine runs backward functions with grad mode off
                     Tensor xin = saved.detach();  // a fresh leaf over x's data
                     if (x_needs_grad) xin.requires_grad_(true);
                     Tensor y;
                     {
                       GeneratorRewind rewind(gen, seed, offset_before);
                       std::optional<DropoutScope> scope;
                       if (ctx) scope.emplace(ctx->step, ctx->first_sample, ctx->seeds);
                       TrainModeScope mode(*lp, training);
                       y = lp->forward(xin);
                       if (gen && gen->offset() != offset_after)
                         ST_THROW(AutogradError, "recompute of '" << lp->scope() << "': the forward drew "
                                                                  << gen->offset() - offset_before
                                                                  << " random counters, the original drew "
                                                                  << offset_after - offset_before);
                     }
                     if (y.requires_grad()) run_backward(y, grad_out, /*retain_graph=*/false);  // params +=, hooks
                     return std::vector<Tensor>{x_needs_grad ? xin.grad() : Tensor()};
                   },
                   GradAttach::in_grad_mode);
  return out;
}

}  // namespace st::runtime
