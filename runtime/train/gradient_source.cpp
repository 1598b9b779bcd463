// Single-process gradient computation: grad-accumulation over micro-batches; validation forwards.
#include "runtime/train/gradient_source.h"

#include "ops/elementwise.h"
#include "ops/step_state.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/parallel/context_shard.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"

namespace st::runtime {

TokenBatch GradientSource::micro_batch_host(int64_t, int64_t) const {
  ST_THROW(ValueError, "this gradient source reads its own micro-batches (" << capture_refusal() << ")");
}

LocalGradientSource::LocalGradientSource(std::shared_ptr<LanguageModel> model, std::shared_ptr<const TokenSource> data,
                                         BatchLayout layout, Device device)
    : model_(std::move(model)), data_(std::move(data)), layout_(layout), device_(device) {
  check_batch_layout(layout_);
}

void check_batch_layout(const BatchLayout& l) {
  ST_CHECK(l.micro_batch >= 1 && l.grad_accum >= 1 && l.dp >= 1 && l.seq_len >= 1 && l.replica >= 0 &&
               l.replica < l.dp && l.cp >= 1 && l.cp_rank >= 0 && l.cp_rank < l.cp,
           ValueError,
           "batch layout: micro-batch " << l.micro_batch << ", grad-accum " << l.grad_accum << ", dp " << l.dp
                                        << ", replica " << l.replica << ", seq-len " << l.seq_len << ", cp " << l.cp
                                        << ", cp rank " << l.cp_rank);
  ST_CHECK(l.cp == 1 || l.seq_len % (2 * l.cp) == 0, ValueError,
           "--cp " << l.cp << ": --seq-len " << l.seq_len << " must divide by 2 x cp = " << 2 * l.cp);
}

// this rank's two chunks of every sequence of b (B, T) → (B, 2C); cp 1: b as is
TokenBatch context_shard(const BatchLayout& l, TokenBatch b) {
  if (l.cp == 1) return b;
  const auto split = ops::ContextSplit::load_balanced;
  b.inputs = shard_sequence(b.inputs, l.cp, l.cp_rank, split, 1);
  b.targets = shard_sequence(b.targets, l.cp, l.cp_rank, split, 1);
  return b;
}

TokenBatch LocalGradientSource::micro_batch_host(int64_t step, int64_t k) const {
  const int64_t B = layout_.micro_batch, first = (layout_.replica * layout_.grad_accum + k) * B;
  return context_shard(layout_, data_->sequences(step, layout_.global_batch(), first, B, layout_.seq_len));
}

TokenBatch LocalGradientSource::micro_batch(int64_t step, int64_t k) const {
  TokenBatch b = micro_batch_host(step, k);
  if (device_ != Device::cpu) {
    b.inputs = b.inputs.to(device_);
    b.targets = b.targets.to(device_);
  }
  return b;
}

void LocalGradientSource::compute_gradients(const StepContext& ctx, GradientSync& sync) {
  const int64_t K = layout_.grad_accum;
  for (int64_t k = 0; k < K; ++k) {
    // dropout masks by global sequence index: the same in every layout (runtime/nn/dropout_context.h)
    DropoutScope dropout_scope(ctx.step, (layout_.replica * K + k) * layout_.micro_batch, ctx.seeds);
    const TokenBatch b = ctx.staged ? (*ctx.staged)[static_cast<size_t>(k)] : micro_batch(ctx.step, k);
    Tensor loss, scaled;
    {
      trace::Scope ts("forward", "compute", k);  // the slices the DP all-reduces overlap in a trace
      loss = model_->loss(model_->forward(b.inputs), b.targets);  // () f32, micro-batch mean
      scaled = ops::mul(loss, ctx.loss_factor);  // loss · float(scale / (K·dp))
    }
    if (k == K - 1) sync.last_backward();
    {
      trace::Scope ts("backward", "compute", k);
      scaled.backward();
    }
    Tensor state = ctx.state;  // a handle of the step's state buffer
    ops::step_state_add_loss(state, loss.detach());
  }
}

double LocalGradientSource::evaluate(const TokenSource& val, int64_t batches) {
  const int64_t B = layout_.micro_batch, T = layout_.seq_len;
  NoGradGuard ng;
  const bool was_training = model_->is_training();
  model_->eval();
  double sum = 0;
  for (int64_t i = layout_.replica; i < batches; i += layout_.dp) {
    trace::Scope ts("eval forward", "compute", i);
    TokenBatch b = context_shard(layout_, val.read(i * B, B, T));  // inputs, targets (B, T), cp: (B, T/cp)
    if (device_ != Device::cpu) {
      b.inputs = b.inputs.to(device_);
      b.targets = b.targets.to(device_);
    }
    sum += model_->loss(model_->forward(b.inputs), b.targets).item();
  }
  model_->train(was_training);
  return sum / static_cast<double>(batches * layout_.cp);  // the cp ranks' means averaged
}

}  // namespace st::runtime
